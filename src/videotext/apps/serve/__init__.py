"""`videotext serve`: the HTTP search API and its page over an index folder (`app.create_app`).

- `app`: the FastAPI app, opened through the folder's owner, and uvicorn;
- `handlers`: one named function per endpoint;
- `schema`: the response models and public paths;
- `access`: the token required off loopback;
- `media`: thumbnails and Range checks.
"""
from videotext.apps.serve.access import is_loopback, require_token_for, token_matches
from videotext.apps.serve.app import STATIC, create_app, serve
from videotext.apps.serve.schema import public_path

__all__ = ["STATIC", "create_app", "is_loopback", "public_path", "require_token_for", "serve", "token_matches"]
