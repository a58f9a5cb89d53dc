"""The apps layer: what a user keeps and serves, each thing with one owner.

- `index_folder`: the index folder (build, open, check), which the CLI, the Python API and the
  HTTP service all go through;
- `serve`: the HTTP service and its page over an opened index folder.
"""
