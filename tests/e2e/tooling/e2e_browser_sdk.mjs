// Opens a page that runs posthog-js in headless Debian Chromium against a Flagstaff server,
// waits until the page is ready, optionally clicks an element (autocapture) and evaluates an
// expression in the page (which may run a whole journey), lets the SDK's request queue flush,
// leaves the page (posthog-js then sends $pageleave with sendBeacon), and prints one JSON object
// on stdout:
//   {results: <the expression's value>, requests: [every request to the API origin],
//    problems: [failed requests, console errors, page errors]}
// Usage: node e2e_browser_sdk.mjs '<json spec>'
//   spec: {"pageUrl": ..., "apiOrigin": ..., "readyWhen": "<JS expression>",
//          "click": "#buy" | null, "collect": "<JS expression, may be a promise>" | null,
//          "supportedCompression": ["base64"] | null   (rewrites the remote config's list),
//          "files": {"<url>": "<local file>"}           (answers those URLs from disk),
//          "awaitAfterLeave": {"url": ..., "headers": {...}} (after leaving, polls that JSON
//                                                 listing until its results are not empty),
//          "block": ["<url glob>"]                       (fails those requests, as a network error would)}
import { readFile } from 'node:fs/promises'
import { chromium } from 'playwright-core'

const CHROMIUM_PATH = process.env.FLAGSTAFF_CHROMIUM || '/usr/bin/chromium'
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking']
// posthog-js flushes its event queue every 3 seconds.
const QUEUE_FLUSH_MS = 3000

class Network {
    constructor(page, apiOrigin, blocked) {
        this.apiOrigin = apiOrigin
        this.blocked = blocked
        this.requests = []
        this.problems = []
        this.pending = new Set()
        this.recordings = []
        this.lastActivity = Date.now()
        page.on('request', (request) => {
            if (!this.isApi(request)) return
            this.pending.add(request)
            this.lastActivity = Date.now()
        })
        page.on('requestfinished', (request) => {
            if (this.isApi(request)) this.recordings.push(this.record(request))
        })
        page.on('requestfailed', (request) => {
            if (!this.isApi(request)) return
            this.pending.delete(request)
            this.lastActivity = Date.now()
            if (this.blocked.has(request.url())) return
            this.problems.push(`request failed: ${request.method()} ${request.url()}: ${request.failure()?.errorText}`)
        })
        page.on('console', (message) => {
            if (message.type() !== 'error' || this.blocked.has(message.location().url)) return
            this.problems.push(`console: ${message.text()} (${message.location().url})`)
        })
        page.on('pageerror', (error) => this.problems.push(`page error: ${error.message}`))
    }

    isApi(request) {
        return request.url().startsWith(this.apiOrigin)
    }

    async record(request) {
        try {
            const response = await request.response()
            this.requests.push({
                method: request.method(),
                url: request.url(),
                resourceType: request.resourceType(),
                status: response ? response.status() : 0,
                headers: await request.allHeaders(),
                responseHeaders: response ? await response.allHeaders() : {},
                bodyBase64: (request.postDataBuffer() ?? Buffer.alloc(0)).toString('base64'),
            })
        } finally {
            this.pending.delete(request)
            this.lastActivity = Date.now()
        }
    }

    // Until no API request is in flight and none started for `quietMs`.
    async settle(page, quietMs, timeoutMs = 15000) {
        const deadline = Date.now() + timeoutMs
        while (Date.now() < deadline) {
            if (this.pending.size === 0 && Date.now() - this.lastActivity >= quietMs) return
            await new Promise((resolve) => setTimeout(resolve, 50))
        }
        this.problems.push(`requests still in flight after ${timeoutMs}ms: ${[...this.pending].map((r) => r.url())}`)
    }
}

async function rewriteCompression(route, supported) {
    const response = await route.fetch()
    const body = (await response.text()).replace(
        /"supportedCompression":\[[^\]]*\]/,
        `"supportedCompression":${JSON.stringify(supported)}`,
    )
    await route.fulfill({ response, body })
}

// Polls a JSON listing (GET `url` with `headers`) until its `results` are not empty.
async function awaitResults({ url, headers = {}, timeoutMs = 15000 }, problems) {
    const deadline = Date.now() + timeoutMs
    while (Date.now() < deadline) {
        const response = await fetch(url, { headers }).catch(() => null)
        if (response?.ok && (await response.json()).results?.length) return
        await new Promise((resolve) => setTimeout(resolve, 100))
    }
    problems.push(`nothing at ${url} ${timeoutMs}ms after leaving the page`)
}

async function main() {
    const spec = JSON.parse(process.argv[2] ?? '{}')
    if (!spec.pageUrl || !spec.apiOrigin) {
        console.error(`usage: e2e_browser_sdk.mjs '{"pageUrl": ..., "apiOrigin": ...}'`)
        process.exit(2)
    }
    const browser = await chromium.launch({ executablePath: CHROMIUM_PATH, headless: true, args: CHROMIUM_ARGS })
    let results = null
    let network
    try {
        const page = await (await browser.newContext()).newPage()
        const blocked = new Set()
        network = new Network(page, spec.apiOrigin, blocked)
        for (const url of spec.block ?? []) {
            await page.route(url, (route) => {
                blocked.add(route.request().url())
                return route.abort('failed')
            })
        }
        for (const [url, file] of Object.entries(spec.files ?? {})) {
            const body = await readFile(file)
            await page.route(url, (route) => route.fulfill({ body, contentType: 'application/javascript' }))
        }
        if (spec.supportedCompression) {
            await page.route(`${spec.apiOrigin}/array/**`, (route) =>
                rewriteCompression(route, spec.supportedCompression),
            )
        }
        await page.goto(spec.pageUrl)
        await page.waitForFunction(spec.readyWhen ?? 'true', null, { timeout: 15000 })
        if (spec.click) await page.click(spec.click)
        if (spec.collect) results = await page.evaluate(spec.collect)
        // Everything the page queued goes out with the queue's next flush.
        await network.settle(page, QUEUE_FLUSH_MS + 300)
        await page.goto('about:blank')
        await network.settle(page, 500)
        await Promise.all(network.recordings)
        // A beacon sent as the page closes is not a request the page reports: when the spec
        // names where its effect shows, keep the browser open until it does.
        if (spec.awaitAfterLeave) await awaitResults(spec.awaitAfterLeave, network.problems)
    } finally {
        await browser.close()
    }
    process.stdout.write(JSON.stringify({ results, requests: network.requests, problems: network.problems }) + '\n')
}

await main()
