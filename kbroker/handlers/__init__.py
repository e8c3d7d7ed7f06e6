"""Request handlers: one module per API key, listed in ``kbroker.handlers.registry``.

Adding an API is one file here plus its name in ``registry.HANDLER_MODULES``::

    # kbroker/handlers/describe_cluster.py
    from kbroker.wire.generated.describe_cluster_response import DescribeClusterResponse

    API_KEY = 60
    MIN_VERSION, MAX_VERSION = 0, 1      # only what is fully implemented

    def handle(ctx, request):            # ctx: kbroker.handlers.context.RequestContext
        ...
        return DescribeClusterResponse(...)

``handle`` returns the response object (encoded at the request's version by the dispatcher),
``None`` for no response (acks=0 produce), or an awaitable of either (coroutines are run as
tasks; responses still leave in request order). It is thin: validate, call one subsystem
through ``ctx.broker`` (``.image``, ``.controller`` for metadata writes, ``.replicas`` for
partition logs), map errors to codes. It never reads a clock: ``ctx.now_ms``.
"""
