// Opens a page that runs the OpenFeature web SDK with the generic OFREP web provider
// (@openfeature/web-sdk, @openfeature/ofrep-web-provider) in headless Debian Chromium, and
// follows its polling of the bulk endpoint: after the first evaluation, it waits for
// `minNotModified` polls answered 304 (the provider sends the ETag back as If-None-Match),
// makes the spec's change (a management API request), waits for the provider's
// ConfigurationChanged event, and evaluates again. Prints one JSON object:
//   {before, after, flagsChanged, bulk: [{status, ifNoneMatch, etag}], problems: [...]}
// Usage: node drive_openfeature_web.mjs '<json spec>'
//   spec: {"pageUrl": ..., "bulkUrl": ..., "minNotModified": 2,
//          "change": {"url": ..., "method": "PATCH", "headers": {...}, "body": {...}}}
// The page sets window.__ready (or window.__fixtureError), window.__evaluate() (the flags'
// details now) and window.__changed (a promise of the changed flag keys).
import { chromium } from 'playwright-core'

const CHROMIUM_PATH = process.env.FLAGSTAFF_CHROMIUM || '/usr/bin/chromium'
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking']
const WAIT_MS = 20000

async function until(check, what) {
    const deadline = Date.now() + WAIT_MS
    while (!check()) {
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
        await new Promise((resolve) => setTimeout(resolve, 50))
    }
}

async function main() {
    const spec = JSON.parse(process.argv[2])
    const browser = await chromium.launch({ executablePath: CHROMIUM_PATH, headless: true, args: CHROMIUM_ARGS })
    const report = { bulk: [], problems: [] }
    try {
        const page = await (await browser.newContext()).newPage()
        page.on('console', (message) => {
            if (message.type() === 'error') report.problems.push(`console: ${message.text()}`)
        })
        page.on('pageerror', (error) => report.problems.push(`page error: ${error.message}`))
        page.on('response', (response) => {
            const request = response.request()
            if (request.method() !== 'POST' || !request.url().startsWith(spec.bulkUrl)) return
            report.bulk.push({
                status: response.status(),
                ifNoneMatch: request.headers()['if-none-match'] ?? null,
                etag: response.headers().etag ?? null,
            })
        })
        await page.goto(spec.pageUrl)
        await page.waitForFunction(() => window.__ready === true || window.__fixtureError, null, { timeout: WAIT_MS })
        const failure = await page.evaluate(() => window.__fixtureError ?? null)
        if (failure) throw new Error(`page script failed: ${failure}`)
        report.before = await page.evaluate(() => window.__evaluate())

        const notModified = () => report.bulk.filter((b) => b.status === 304).length
        await until(() => notModified() >= spec.minNotModified, `${spec.minNotModified} polls answered 304`)
        const { url, method, headers, body } = spec.change
        const changed = await fetch(url, { method, headers, body: JSON.stringify(body) })
        if (!changed.ok) throw new Error(`the change failed: ${changed.status} ${await changed.text()}`)

        report.flagsChanged = await page.evaluate(
            (ms) => Promise.race([window.__changed, new Promise((_, reject) => setTimeout(() => reject(new Error('no ConfigurationChanged')), ms))]),
            WAIT_MS,
        )
        report.after = await page.evaluate(() => window.__evaluate())
    } finally {
        await browser.close()
    }
    console.log(JSON.stringify(report))
}

await main()
