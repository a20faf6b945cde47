"""Data shipped with the package, read through `gb300lane.paths` / importlib.resources.

    cards/                      the card files (the write-up's BR1/BR2 and their local versions)
    vllm-<version>-schema.json  vLLM's config fields, snapshot by scripts/snapshot_vllm_schema.py
    grafana-lane-dashboard.json the lane's dashboard, built by scripts/build_grafana_dashboard.py

The repository keeps three more at its top level, where people read and edit
them: `recipes/`, `templates/` and the write-up's receipts in `results/`. A
wheel carries them here (`recipes/`, `templates/`, `receipts/<run>/`), copied
in at build time by setup.py; `gb300lane.paths.shipped` finds them in either.
"""
