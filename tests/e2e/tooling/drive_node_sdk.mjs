// Runs one scenario of the real posthog-node SDK against a PostHog-compatible host.
// Usage: node drive_node_sdk.mjs <host> <token> <scenario>
// Scenarios: capture, identify, alias, group-identify, flags.
import { PostHog } from 'posthog-node'

const SCENARIOS = {
    capture: async (client) => {
        client.capture({
            distinctId: 'user-42',
            event: 'order completed',
            properties: { plan: 'pro', amount: 19.99, items: 3 },
            groups: { company: 'acme' },
        })
        client.capture({
            distinctId: 'anon-7',
            event: 'page viewed',
            properties: { $process_person_profile: false, path: '/pricing' },
        })
    },
    identify: async (client) => {
        client.identify({
            distinctId: 'user-42',
            properties: {
                $set: { email: 'ada@example.com', plan: 'pro' },
                $set_once: { first_seen: '2026-01-01' },
                $anon_distinct_id: 'anon-7',
            },
        })
    },
    alias: async (client) => {
        client.alias({ distinctId: 'user-42', alias: 'ada@example.com' })
    },
    'group-identify': async (client) => {
        client.groupIdentify({
            groupType: 'company',
            groupKey: 'acme',
            properties: { name: 'Acme Inc', subscription: 'enterprise', founded: '2015-03-01T00:00:00Z' },
            distinctId: 'user-42',
        })
    },
    flags: async (client) => {
        const flags = await client.evaluateFlags('user-42', {
            groups: { company: 'acme' },
            personProperties: { plan: 'pro' },
            groupProperties: { company: { name: 'Acme Inc' } },
        })
        flags.isEnabled('new-checkout')
        client.capture({ distinctId: 'user-42', event: 'checkout started', flags })
    },
}

async function main() {
    const [host, token, scenario] = process.argv.slice(2)
    const run = SCENARIOS[scenario]
    if (!host || !token || !run) {
        console.error(`usage: drive_node_sdk.mjs <host> <token> <${Object.keys(SCENARIOS).join('|')}>`)
        process.exit(2)
    }
    const errors = []
    const client = new PostHog(token, { host, fetchRetryCount: 0 })
    client.on('error', (error) => errors.push(error))
    await run(client)
    await client.shutdown()
    if (errors.length > 0) {
        console.error('posthog-node reported errors:', errors)
        process.exit(1)
    }
}

await main()
