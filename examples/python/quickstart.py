"""Send events and evaluate a flag with posthog-python against a local Flagstaff.

Install what it needs, then run it:
    pip install -r examples/python/requirements.txt
    FLAGSTAFF_TOKEN=phc_... FLAGSTAFF_PERSONAL_KEY=phx_... python examples/python/quickstart.py
(FLAGSTAFF_URL, the server's URL, defaults to http://127.0.0.1:8000.)
"""

import os

import requests
from posthog import Posthog

host = os.environ.get("FLAGSTAFF_URL", "http://127.0.0.1:8000")
api = requests.Session()
api.headers["Authorization"] = f"Bearer {os.environ['FLAGSTAFF_PERSONAL_KEY']}"
flags_url = f"{host}/api/projects/@current/feature_flags/"

# A flag for users on the pro plan (a 400 means it exists already).
pro_only = {"properties": [{"key": "plan", "value": "pro", "type": "person"}]}
api.post(flags_url, json={"key": "new-checkout", "filters": {"groups": [pro_only]}})

posthog = Posthog(os.environ["FLAGSTAFF_TOKEN"], host=host)
posthog.set(distinct_id="quickstart-user", properties={"plan": "pro", "email": "ada@example.com"})
posthog.capture("checkout opened", distinct_id="quickstart-user", properties={"cart_items": 3})
posthog.flush()  # events are stored once the server answers

for user in ("quickstart-user", "someone-else"):
    flags = posthog.evaluate_flags(user)  # one /flags call; reads send $feature_flag_called
    print(f"new-checkout for {user}:", flags.get_flag("new-checkout"))
posthog.shutdown()

events = api.get(
    f"{host}/api/projects/@current/events/", params={"distinct_id": "quickstart-user"}
).json()["results"]
for event in reversed(events):
    print(event["timestamp"], event["event"], event["properties"].get("$feature_flag", ""))
