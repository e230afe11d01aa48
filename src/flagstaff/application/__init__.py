"""What the product does, one module per product: the use cases that the HTTP API, the
console, the CLI and the worker jobs call (they only decode, authorise, call and render).

Each use case takes typed inputs and the acting principal, works through a narrow store
protocol of its own, and returns records or raises :class:`~.errors.ApiError` (PostHog's
error shape, which every adapter renders its own way)."""
