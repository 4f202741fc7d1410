"""`python -m llamafit.server.embedded_main …`: llama-cpp-python's own server (`python -m
llama_cpp.server`, same settings) plus `GET /health`, which llama-server has and llama-swap checks
by default.

llama-cpp-python's create_app loads the model before uvicorn listens, so /health answers 200
exactly when the model is loaded. An edge module: it runs only in the server's process.
"""

from __future__ import annotations

from typing import Any


def main() -> None:
    import llama_cpp.server.__main__ as server_main

    create_app = server_main.create_app

    def create_app_with_health(**kwargs: Any) -> Any:
        app = create_app(**kwargs)

        @app.get("/health", include_in_schema=False)
        def health() -> dict[str, str]:
            return {"status": "ok"}

        return app

    server_main.create_app = create_app_with_health  # type: ignore[assignment]
    server_main.main()


if __name__ == "__main__":
    main()
