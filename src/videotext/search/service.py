"""The HTTP service lives in `videotext.apps.serve` (it opens its index folder through the folder's owner)."""
raise ImportError("videotext.search.service is now videotext.apps.serve (create_app, serve, require_token_for)")
