"""Calls to the web's ASGI application (config.asgi: the request guard, the predict route, then
Django), made in this process, as uvicorn would make them; the Django test client goes around
all three."""

import asyncio

import httpx


def asgi_post(path: str, *, headers: dict | None = None, host: str = "testserver", **kwargs):
    """POST `path` through config.asgi.application; httpx's `files=`, `data=`, `content=`."""
    from config.asgi import application

    async def call():
        transport = httpx.ASGITransport(app=application, client=("127.0.0.1", 40000))
        async with httpx.AsyncClient(transport=transport, base_url=f"http://{host}") as client:
            return await client.post(path, headers=headers, **kwargs)

    return asyncio.run(call())


def short_way_count() -> int:
    """Calls the predict route has answered itself (config.predict_route) in this process."""
    from config.asgi import application

    return application.app.app.answered  # RefusalPacing(RequestGuard(PredictRoute))
