// Evaluates flags through the OpenFeature server SDK with the generic OFREP provider
// (@openfeature/server-sdk, @openfeature/ofrep-provider) against a Flagstaff server, and prints
// one JSON object: {results: [<evaluation details>, ...]} in the order of the spec's evaluations.
// Usage: node drive_openfeature_node.mjs '<json spec>'
//   spec: {"baseUrl": ..., "token": ..., "evaluations": [{"key": ..., "type": "boolean" | "string",
//          "default": <value>, "context": {...}}]}
import { OpenFeature } from '@openfeature/server-sdk'
import { OFREPProvider } from '@openfeature/ofrep-provider'

async function main() {
    const spec = JSON.parse(process.argv[2])
    const provider = new OFREPProvider({
        baseUrl: spec.baseUrl,
        headers: [['Authorization', `Bearer ${spec.token}`]],
    })
    await OpenFeature.setProviderAndWait(provider)
    const client = OpenFeature.getClient()
    const results = []
    for (const evaluation of spec.evaluations) {
        const details =
            evaluation.type === 'string'
                ? await client.getStringDetails(evaluation.key, evaluation.default, evaluation.context)
                : await client.getBooleanDetails(evaluation.key, evaluation.default, evaluation.context)
        results.push({
            key: details.flagKey,
            value: details.value,
            variant: details.variant ?? null,
            reason: details.reason ?? null,
            errorCode: details.errorCode ?? null,
            errorMessage: details.errorMessage ?? null,
            flagMetadata: details.flagMetadata ?? {},
        })
    }
    await OpenFeature.close()
    console.log(JSON.stringify({ results }))
}

await main()
