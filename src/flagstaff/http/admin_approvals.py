"""Approvals on the management API: a project's policy (``/approval_policy/``, admins change
it) and the change requests flag writes become while it is on (``/change_requests/``: list,
get, approve, reject). What they do: ``application/approvals.py``.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from flagstaff.accounts.roles import Action
from flagstaff.activity.approvals import RequestStatus
from flagstaff.application import approvals
from flagstaff.application.approvals import (
    DecisionInput,
    policy_json,
    request_json,
    request_with_flag_json,
)
from flagstaff.application.context import Caller
from flagstaff.application.errors import ApiError
from flagstaff.application.inputs import decode
from flagstaff.http.admin_context import Handler
from flagstaff.http.rest import int_param, json_body, paginated, path_int
from flagstaff.store.base import Store

P = "/api/projects/{project_id}"


async def get_approval_policy(ctx: Caller[Store], request: Request) -> Any:
    return policy_json(await approvals.get_policy(ctx))


async def update_approval_policy(ctx: Caller[Store], request: Request) -> Any:
    body = approvals.policy_input(await json_body(request))
    return policy_json(await approvals.set_policy(ctx, body))


async def list_change_requests(ctx: Caller[Store], request: Request) -> Any:
    """Newest first; ``status`` and ``record_id`` filter."""
    limit = int_param(request, "limit", 100, 1000) or 100
    offset = int_param(request, "offset", 0)
    raw_status = request.query_params.get("status")
    try:
        status = RequestStatus(raw_status) if raw_status else None
    except ValueError:
        known = ", ".join(s.value for s in RequestStatus)
        raise ApiError(400, "invalid_input", f"status must be one of {known}", "status") from None
    raw_record = request.query_params.get("record_id")
    if raw_record is not None and not (raw_record.isdigit() and len(raw_record) < 19):
        raise ApiError(400, "invalid_input", "record_id must be a feature flag id", "record_id")
    record_id = int(raw_record) if raw_record else None
    page = await approvals.list_requests(ctx, status, record_id, limit, offset)
    results = [request_with_flag_json(shown) for shown in page.results]
    return paginated(request, page.count, results, limit, offset)


async def get_change_request(ctx: Caller[Store], request: Request) -> Any:
    return request_with_flag_json(await approvals.get_request(ctx, path_int(request, "request_id")))


async def approve_change_request(ctx: Caller[Store], request: Request) -> Any:
    """Apply the request now: its author cannot, nor can a viewer."""
    body = decode(DecisionInput, await json_body(request))
    decided = await approvals.approve(ctx, path_int(request, "request_id"), body)
    return request_json(decided, None)  # decided: no changes to show


async def reject_change_request(ctx: Caller[Store], request: Request) -> Any:
    """Refuse the request (anyone who may approve it), or withdraw it (its author)."""
    body = decode(DecisionInput, await json_body(request))
    decided = await approvals.reject(ctx, path_int(request, "request_id"), body)
    return request_json(decided, None)  # decided: no changes to show


ROUTES = [
    ("GET", P + "/approval_policy/", get_approval_policy, "The project's approval policy"),
    (
        "PATCH",
        P + "/approval_policy/",
        update_approval_policy,
        "Turn approval of flag changes on or off (admins)",
    ),
    (
        "GET",
        P + "/change_requests/",
        list_change_requests,
        "List change requests (flag changes waiting for approval), newest first",
    ),
    ("GET", P + "/change_requests/{request_id}/", get_change_request, "Get a change request"),
    (
        "POST",
        P + "/change_requests/{request_id}/approve/",
        approve_change_request,
        "Approve a change request: its change goes live now (not by its author)",
    ),
    (
        "POST",
        P + "/change_requests/{request_id}/reject/",
        reject_change_request,
        "Reject a change request, or withdraw your own",
    ),
]

ROUTE_ACTIONS: dict[Handler, Action] = {
    update_approval_policy: Action.MANAGE,
    # who may decide is the pure rules' call (approvals.approve / reject): a viewer is
    # refused there, an author may withdraw their own request but not approve it
    approve_change_request: Action.VIEW,
    reject_change_request: Action.VIEW,
}
