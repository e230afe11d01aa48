// Opens a page that runs posthog-js in headless Debian Chromium, waits for the page's script to
// finish its calls, lets the SDK's request queue flush, then leaves the page (which makes
// posthog-js send $pageleave with sendBeacon).
// Usage: node drive_browser_sdk.mjs <page_url> [settle_ms]
// The page sets window.__fixtureDone = true when its calls are made, or window.__fixtureError.
import { chromium } from 'playwright-core'

const CHROMIUM_PATH = process.env.FLAGSTAFF_CHROMIUM || '/usr/bin/chromium'
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking']

async function main() {
    const [pageUrl, settleArg] = process.argv.slice(2)
    if (!pageUrl) {
        console.error('usage: drive_browser_sdk.mjs <page_url> [settle_ms]')
        process.exit(2)
    }
    const settleMs = Number(settleArg ?? 4000)
    const browser = await chromium.launch({
        executablePath: CHROMIUM_PATH,
        headless: true,
        args: CHROMIUM_ARGS,
    })
    try {
        const page = await (await browser.newContext()).newPage()
        page.on('console', (message) => {
            if (message.type() === 'error') console.error(`page console: ${message.text()}`)
        })
        page.on('pageerror', (error) => console.error(`page error: ${error.message}`))
        await page.goto(pageUrl)
        await page.waitForFunction(() => window.__fixtureDone === true || window.__fixtureError, null, {
            timeout: 15000,
        })
        const failure = await page.evaluate(() => window.__fixtureError ?? null)
        if (failure) throw new Error(`page script failed: ${failure}`)
        await page.waitForTimeout(settleMs)
        await page.goto('about:blank')
        await page.waitForTimeout(1000)
    } finally {
        await browser.close()
    }
}

await main()
