"""A/B of what the background jobs and a flag write cost the server, by CPU time.

Run: ``python -m bench.management_writes --variant main:PYTHONPATH=/path/to/main/src
--variant branch: [--webhooks 2] [--rounds 3] [--postgres]``.

Each variant is a server (2 workers) started with its environment. The rounds interleave the
variants and read the CPU seconds (user + system, /proc) of the server's processes: idle for
``--idle`` seconds (what the per-worker polls cost: due scheduled changes, and where the
webhook job exists, due deliveries), then ``--patches`` flag PATCHes one after another
(the management write path: validation, the approval policy check, the activity record and its
webhook look-up). With ``--webhooks N`` the variants whose API has webhooks get N endpoints on
a receiver in this process, so each PATCH is also enqueued, sent and recorded N times; the
other variants (an older checkout) are measured without them.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

import httpx
from tests.server import Api, Server
from tests.webhook_receiver import Receiver

from bench.cpu_ab import _variant
from bench.load import CpuMeter, start_server

P = "/api/projects/@current"


def _prepare(name: str, srv: Server, receiver: Receiver, hooks: int) -> tuple[Api, int, bool]:
    api = Api(srv.url)
    flag = api.create_flag(key=f"bench-{uuid.uuid4().hex[:6]}", filters={"groups": []})
    has_webhooks = api.get(f"{P}/webhooks/").status_code == 200
    if has_webhooks:
        for i in range(hooks):
            made = api.post(
                f"{P}/webhooks/",
                json={"url": receiver.url(f"/{name}-{i}"), "scopes": ["FeatureFlag"]},
            )
            assert made.status_code == 201, made.text
    return api, int(flag["id"]), has_webhooks


def _settle(receiver: Receiver, name: str, hooks: int, sent: int) -> None:
    """Wait until the receiver got every delivery so far (and the outcomes were recorded), so
    the sending falls in the round that caused it."""
    for i in range(hooks):
        receiver.wait(f"/{name}-{i}", sent, seconds=120)
    if hooks:
        time.sleep(1.5)  # a poll and the outcomes' writes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--variant", action="append", required=True, help="name:ENV=V,ENV=V")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle", type=float, default=10.0)
    parser.add_argument("--patches", type=int, default=300)
    parser.add_argument("--webhooks", type=int, default=0)
    parser.add_argument("--postgres", action="store_true")
    args = parser.parse_args()
    variants = [_variant(v) for v in args.variant]
    receiver = Receiver()
    servers: dict[str, Server] = {}
    prepared: dict[str, tuple[Api, int, bool]] = {}
    idle: dict[str, list[float]] = {}
    patch: dict[str, list[float]] = {}
    try:
        for name, env in variants:
            srv, _root = start_server(2, env, postgres=args.postgres)
            servers[name] = srv
            prepared[name] = _prepare(name, srv, receiver, args.webhooks)
        time.sleep(2.0)
        for round_no in range(args.rounds):
            order = variants if round_no % 2 == 0 else variants[::-1]
            for name, _env in order:
                srv = servers[name]
                api, flag_id, has_webhooks = prepared[name]
                assert srv.proc is not None
                meter = CpuMeter(srv.proc.pid)
                meter.start()
                time.sleep(args.idle)
                spent = meter.stop()
                idle[name] = [*idle.get(name, []), sum(spent.values()) / args.idle * 1000]
                meter.start()
                with httpx.Client(base_url=srv.url, headers=api.client.headers) as client:
                    for i in range(args.patches):
                        answer = client.patch(
                            f"{P}/feature_flags/{flag_id}/", json={"name": f"r{round_no} {i}"}
                        )
                        assert answer.status_code == 200, answer.text
                hooks = args.webhooks if has_webhooks else 0
                _settle(receiver, name, hooks, (round_no + 1) * args.patches)
                spent = meter.stop()
                patch[name] = [*patch.get(name, []), sum(spent.values()) / args.patches * 1e6]
        print(f"\nmedian of {args.rounds} rounds (min-max)")
        print(f"{'variant':<12}{'idle CPU ms/s':>24}{'CPU us per PATCH':>28}")
        for name, _env in variants:
            i, p = idle[name], patch[name]
            print(
                f"{name:<12}{statistics.median(i):10.2f} ({min(i):.2f}-{max(i):.2f})"
                f"{statistics.median(p):14.0f} ({min(p):.0f}-{max(p):.0f})"
            )
    finally:
        for srv in servers.values():
            srv.stop()
        receiver.close()


if __name__ == "__main__":
    main()
