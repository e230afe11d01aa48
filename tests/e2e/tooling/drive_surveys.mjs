// Opens a page running posthog-js in headless Debian Chromium and reports what the visitor saw.
// Usage: node drive_surveys.mjs '<json spec>'
//   spec: {"pageUrl": ..., "surveyId": ..., "answer": "<text>" | null, "reload": bool, "watchMs": 5000}
// The page sets window.__fixtureDone (or __fixtureError) once posthog-js has decided which
// surveys match, and window.__result with what it wants reported. Prints one JSON object:
// { result, shown, resultAfterReload, shownAfterReload }, where shown says whether the
// survey's popover (div.PostHogSurvey-<id>, rendered by posthog-js) appeared within watchMs.
import { chromium } from 'playwright-core'

const CHROMIUM_PATH = process.env.FLAGSTAFF_CHROMIUM || '/usr/bin/chromium'
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking']

async function settled(page) {
    await page.waitForFunction(() => window.__fixtureDone === true || window.__fixtureError, null, {
        timeout: 45000,
    })
    const failure = await page.evaluate(() => window.__fixtureError ?? null)
    if (failure) throw new Error(`page script failed: ${failure}`)
    return page.evaluate(() => window.__result ?? null)
}

async function appears(page, selector, watchMs) {
    try {
        await page.locator(selector).first().waitFor({ state: 'attached', timeout: watchMs })
        return true
    } catch {
        return false
    }
}

// Waits (up to 15 s) until a POST has started since `before` posts (-1: none needed) and every
// POST has finished: closing or reloading the page aborts a request still in flight.
async function drained(page, posts, before) {
    const deadline = Date.now() + 15000
    while ((posts.started <= before || posts.pending > 0) && Date.now() < deadline) {
        await page.waitForTimeout(50)
    }
}

async function main() {
    const options = JSON.parse(process.argv[2])
    const watchMs = options.watchMs ?? 5000
    const popover = `.PostHogSurvey-${options.surveyId}`
    const browser = await chromium.launch({ executablePath: CHROMIUM_PATH, headless: true, args: CHROMIUM_ARGS })
    const report = {}
    try {
        const page = await (await browser.newContext()).newPage()
        page.on('pageerror', (error) => console.error(`page error: ${error.message}`))
        // Events leave as POSTs; a reload aborts one still in flight, so the driver waits for
        // every POST the answer started to finish before it reloads.
        const posts = { started: 0, pending: 0 }
        const finished = (request) => { if (request.method() === 'POST') posts.pending -= 1 }
        page.on('request', (request) => {
            if (request.method() === 'POST') { posts.started += 1; posts.pending += 1 }
        })
        page.on('requestfinished', finished)
        page.on('requestfailed', finished)
        await page.goto(options.pageUrl)
        report.result = await settled(page)
        report.shown = options.surveyId ? await appears(page, popover, watchMs) : false
        if (report.shown && options.answer) {
            await page.locator(`${popover} textarea`).fill(options.answer)
            const before = posts.started
            await page.locator(`${popover} .form-submit`).click()
            await page.waitForFunction(() => window.__sent === true, null, { timeout: 10000 })
            await drained(page, posts, before)
        }
        if (options.reload) {
            await page.reload()
            report.resultAfterReload = await settled(page)
            report.shownAfterReload = await appears(page, popover, watchMs)
        }
        await page.waitForTimeout(500)
        await drained(page, posts, -1)
    } finally {
        await browser.close()
    }
    console.log(JSON.stringify(report))
}

await main()
