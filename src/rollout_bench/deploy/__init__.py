"""Deployment, not benchmark code: carrying the pipeline's environments to an air-gapped GPU host
(docs/design.md §11). No job imports it, so no job's code inputs include it.

- `wheelhouse`: build one backend group's wheels for the host here, install them there.
"""
