"""Serving under load, below its entry (`ouroboros/serving/batch.py`: `serve`, `slot_factory`, `engine_for`):

    load.py        Request, Load (closed / open loop), arrivals, Served / ServeResult (the serving metrics) and the
                   serving checks that config.py and serve() share
    scheduler.py   the Engine protocol, Row (a request slot's view of a model), Task, the deterministic Scheduler
    loadaware.py   LoadAware: caps each step's draft depth by expected tokens per batched second

The engines that fire the batched forwards belong to their backends (ouroboros/backends/hf.py `HFEngine`,
simulators/serving.py `SimEngine`): a backend kind's `engine(backend, prefill)` (ouroboros/backends/base.py
`BackendKind`). Knows nothing of Hydra or records.
"""
