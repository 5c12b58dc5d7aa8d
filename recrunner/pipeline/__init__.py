"""`recrun pipeline`: from new data to a served model, gated.

The steps (recrunner.config.pipeline.Step) run in order on this machine (`run.py`), each in
its own module, or render as an Argo Workflow (`workflow.py`). Every step reads the same
resolved config (`<output_dir>/pipeline/config.yaml`) and records what it decided and why in
`<output_dir>/pipeline.json` (`record.py`); a rerun continues from the step that failed.
"""
