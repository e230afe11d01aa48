// Runs one end-to-end scenario of the real posthog-node SDK against a Flagstaff server and prints
// one JSON object on stdout: what the scenario observed (`results`) and every HTTP request the
// SDK made (`requests`, recorded through posthog-node's `fetch` option).
// Usage: node e2e_node_sdk.mjs '<json spec>'
//   spec: {"scenario": "ingest" | "flags", "host": ..., "token": ..., "personalKey": ...,
//          "grid": [{distinct_id, person_properties, groups, group_properties}, ...]}
import { PostHog } from 'posthog-node'

const ACME = { name: 'Acme Inc', subscription: 'enterprise', founded: '2015-03-01T00:00:00Z' }

async function bodyBytes(body) {
    if (body === undefined || body === null) return Buffer.alloc(0)
    if (typeof body === 'string') return Buffer.from(body)
    if (body instanceof Blob) return Buffer.from(await body.arrayBuffer())
    if (body instanceof ArrayBuffer) return Buffer.from(body)
    if (ArrayBuffer.isView(body)) return Buffer.from(body.buffer, body.byteOffset, body.byteLength)
    throw new Error(`cannot record a request body of type ${body?.constructor?.name}`)
}

function recordingFetch(log) {
    return async (url, options = {}) => {
        const body = await bodyBytes(options.body)
        const response = await fetch(url, options)
        log.push({
            method: options.method ?? 'GET',
            url: String(url),
            status: response.status,
            headers: Object.fromEntries(new Headers(options.headers ?? {})),
            responseHeaders: Object.fromEntries(response.headers),
            bodyBase64: body.toString('base64'),
        })
        return response
    }
}

function clientFor(spec, log, options = {}) {
    const client = new PostHog(spec.token, {
        host: spec.host,
        fetch: recordingFetch(log),
        fetchRetryCount: 0,
        ...options,
    })
    client.on('error', (error) => {
        throw error
    })
    return client
}

async function ingest(spec, log) {
    const client = clientFor(spec, log)
    client.capture({ distinctId: 'anon-node', event: 'page viewed', properties: { path: '/pricing' } })
    client.capture({
        distinctId: 'user-node',
        event: 'order completed',
        properties: { plan: 'pro', amount: 19.99, items: 3 },
        groups: { company: 'acme' },
    })
    client.setPersonProperties({
        distinctId: 'user-node',
        properties: { email: 'ada@example.com', plan: 'pro' },
        propertiesOnce: { first_seen: '2026-01-01' },
    })
    client.identify({
        distinctId: 'user-node',
        properties: { $set: { name: 'Ada' }, $set_once: { signup: 'web' }, $anon_distinct_id: 'anon-node' },
    })
    client.alias({ distinctId: 'user-node', alias: 'legacy-node' })
    client.groupIdentify({ groupType: 'company', groupKey: 'acme', properties: ACME, distinctId: 'user-node' })
    client.capture({ distinctId: 'user-node', event: 'invoice paid', groups: { company: 'initech' } })
    client.capture({
        distinctId: 'ghost-node',
        event: 'docs viewed',
        properties: { $process_person_profile: false, path: '/docs' },
    })
    await client.shutdown()

    const history = clientFor(spec, log, { historicalMigration: true })
    history.capture({
        distinctId: 'hist-node',
        event: '$identify',
        properties: { $set: { email: 'old@example.com' } },
        timestamp: new Date('2024-05-01T09:00:00Z'),
    })
    history.capture({
        distinctId: 'hist-node',
        event: 'order completed',
        properties: { plan: 'basic', amount: 5 },
        timestamp: new Date('2024-05-01T09:05:00Z'),
    })
    await history.shutdown()
    return {}
}

function isFlagsRequest(request) {
    return new URL(request.url).pathname.replace(/\/$/, '') === '/flags'
}

function isDefinitionsRequest(request) {
    return new URL(request.url).pathname === '/flags/definitions'
}

function evaluationOptions(c) {
    return { personProperties: c.person_properties, groups: c.groups, groupProperties: c.group_properties }
}

async function flags(spec, log) {
    const setup = clientFor(spec, log)
    setup.groupIdentify({ groupType: 'company', groupKey: 'acme', properties: ACME, distinctId: 'user-node' })
    setup.setPersonProperties({ distinctId: 'user-node', properties: { plan: 'pro' } })
    await setup.shutdown()

    const remote = clientFor(spec, log)
    const results = {
        proStored: await remote.getFeatureFlag('pro-feature', 'user-node'),
        proFree: await remote.getFeatureFlag('pro-feature', 'free-node'),
        proFreeOverridden: await remote.getFeatureFlag('pro-feature', 'free-node', {
            personProperties: { plan: 'pro' },
        }),
        variant: await remote.getFeatureFlag('checkout-variant', 'user-node'),
        companyAcme: await remote.getFeatureFlag('company-beta', 'user-node', { groups: { company: 'acme' } }),
        companyInitech: await remote.getFeatureFlag('company-beta', 'user-node', {
            groups: { company: 'initech' },
        }),
        proPayload: await remote.getFeatureFlagPayload('pro-feature', 'user-node'),
        all: await remote.getAllFlags('user-node', { groups: { company: 'acme' } }),
        allAndPayloads: await remote.getAllFlagsAndPayloads('user-node', { groups: { company: 'acme' } }),
    }
    const snapshot = await remote.evaluateFlags('user-node', { groups: { company: 'acme' } })
    results.snapshotPro = snapshot.isEnabled('pro-feature')
    remote.capture({ distinctId: 'user-node', event: 'checkout started', flags: snapshot })
    await remote.flush()

    const local = clientFor(spec, log, { personalApiKey: spec.personalKey, featureFlagsPollingInterval: 600000 })
    results.localReady = await local.waitForLocalEvaluationReady(10000)
    // A second poll, which must be answered 304. The first load's promise may still be
    // settling when the client reports ready; a reload then joins it instead of polling.
    for (let tries = 0; log.filter(isDefinitionsRequest).length < 2 && tries < 20; tries++) {
        await new Promise((resolve) => setTimeout(resolve, 25))
        await local.reloadFeatureFlags()
    }
    results.remoteConfig = await local.getRemoteConfigPayload('pro-feature')
    const flagRequestsBefore = log.filter(isFlagsRequest).length
    results.localGrid = []
    for (const c of spec.grid) {
        results.localGrid.push(
            await local.getAllFlags(c.distinct_id, { ...evaluationOptions(c), onlyEvaluateLocally: true }),
        )
    }
    results.localFlagRequests = log.filter(isFlagsRequest).length - flagRequestsBefore
    results.remoteGrid = []
    for (const c of spec.grid) {
        results.remoteGrid.push(await remote.getAllFlags(c.distinct_id, evaluationOptions(c)))
    }
    await local.shutdown()
    await remote.shutdown()
    return results
}

const SCENARIOS = { ingest, flags }

async function main() {
    const spec = JSON.parse(process.argv[2] ?? '{}')
    const run = SCENARIOS[spec.scenario]
    if (!run) {
        console.error(`usage: e2e_node_sdk.mjs '{"scenario": "${Object.keys(SCENARIOS).join('|')}", ...}'`)
        process.exit(2)
    }
    const log = []
    const results = await run(spec, log)
    process.stdout.write(JSON.stringify({ results, requests: log }) + '\n')
}

await main()
