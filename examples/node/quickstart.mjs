// Send events and evaluate a flag with posthog-node against a local Flagstaff.
// Run: cd examples/node && npm install
//      FLAGSTAFF_TOKEN=phc_... FLAGSTAFF_PERSONAL_KEY=phx_... node quickstart.mjs
// (FLAGSTAFF_URL, the server's URL, defaults to http://127.0.0.1:8000.)
import { PostHog } from 'posthog-node'

const host = process.env.FLAGSTAFF_URL ?? 'http://127.0.0.1:8000'
const api = (path, init = {}) =>
    fetch(`${host}/api/projects/@current${path}`, {
        ...init,
        headers: { Authorization: `Bearer ${process.env.FLAGSTAFF_PERSONAL_KEY}`, 'Content-Type': 'application/json' },
    })

// A flag for users on the pro plan (a 400 means it exists already).
const proOnly = { properties: [{ key: 'plan', value: 'pro', type: 'person' }] }
await api('/feature_flags/', { method: 'POST', body: JSON.stringify({ key: 'new-checkout', filters: { groups: [proOnly] } }) })

const posthog = new PostHog(process.env.FLAGSTAFF_TOKEN, { host })
posthog.identify({ distinctId: 'quickstart-node', properties: { plan: 'pro', email: 'ada@example.com' } })
posthog.capture({ distinctId: 'quickstart-node', event: 'checkout opened', properties: { cart_items: 3 } })
await posthog.flush() // events are stored once the server answers

for (const user of ['quickstart-node', 'someone-else']) {
    const flags = await posthog.evaluateFlags(user) // one /flags call; reads send $feature_flag_called
    console.log(`new-checkout for ${user}:`, flags.getFlag('new-checkout'))
}
await posthog.shutdown()

const { results } = await (await api('/events/?distinct_id=quickstart-node')).json()
for (const event of results.reverse()) {
    console.log(event.timestamp, event.event, event.properties.$feature_flag ?? '')
}
