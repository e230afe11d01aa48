"""posthog-js loading itself and its lazy bundles from Flagstaff, in headless Chromium.

The page (on another origin) loads ``<api_host>/static/array.js`` as the snippet does, inits
posthog-js with Flagstaff as ``api_host``, and asks it to load its surveys bundle the way it
does when the remote config enables surveys: from ``/static/surveys.js?v=<version>`` by
default, from ``/static/<version>/surveys.js`` with ``strict_script_versioning``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.e2e.deps import TOOLING
from tests.e2e.site import Site
from tests.server import PROJECT_TOKEN, Server

pytestmark = pytest.mark.usefixtures("chromium")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def installed_bundles() -> None:
    """The setup script `make run` calls; a no-op once the pinned release is installed."""
    subprocess.run(["bash", str(ROOT / "scripts/install-posthog-js.sh")], check=True)


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>bundles</title></head><body>
<script src="__HOST__/static/array.js"></script>
<script>
const settings = __SETTINGS__;
const fail = (message) => { window.__fixtureError = message };
try {
  posthog.init(settings.token, {
    api_host: settings.host,
    strict_script_versioning: settings.strict,
    opt_out_useragent_filter: true,
    disable_surveys: true,
    loaded: (ph) => {
      window.__PosthogExtensions__.loadExternalDependency(ph, 'surveys', (error) => {
        if (error) return fail('surveys bundle did not load: ' + error);
        if (typeof window.__PosthogExtensions__.generateSurveys !== 'function') {
          return fail('the surveys bundle ran but did not register');
        }
        const loaded = performance.getEntriesByType('resource')
          .map((entry) => entry.name)
          .filter((name) => name.includes('surveys.js'));
        const wanted = settings.host + settings.path.replace('VERSION', ph.version);
        if (!loaded.some((name) => name.startsWith(wanted))) {
          return fail('surveys.js came from ' + JSON.stringify(loaded) + ', not ' + wanted);
        }
        window.__fixtureDone = true;
      });
    },
  });
} catch (error) {
  fail(String(error));
}
</script></body></html>
"""


@pytest.mark.parametrize(
    ("strict", "path"),
    [(False, "/static/surveys.js?v=VERSION"), (True, "/static/VERSION/surveys.js")],
)
def test_posthog_js_loads_array_and_surveys_bundles_from_flagstaff(
    flagstaff: Server, strict: bool, path: str
) -> None:
    settings = {"token": PROJECT_TOKEN, "host": flagstaff.url, "strict": strict, "path": path}
    page = PAGE.replace("__HOST__", flagstaff.url).replace("__SETTINGS__", json.dumps(settings))
    with Site() as site:
        url = site.add("/bundles.html", page.encode())
        done = subprocess.run(
            ["node", "drive_browser_sdk.mjs", url, "0"],
            cwd=TOOLING,
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
    assert done.returncode == 0, done.stderr + done.stdout
