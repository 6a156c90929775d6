"""vLLM as a peer: its greedy decoding and its own speculative decoding (`vllm_greedy`, `vllm_ngram`, `vllm_draft`,
`vllm_suffix`), measured in the same harness as our strategies, on the same prompts and budgets, interleaved with
them prompt by prompt.

vLLM pins its own torch and transformers, which this project's environment does not share, so it runs in its own
venv (`env`: where it is, the one error line when it is missing, the command that makes it) as a worker process
(`worker`, a script that imports vLLM and nothing of ours but `protocol`), driven over JSON lines (`protocol`) by
`client`, which turns its answers into our records. Imports nothing of vLLM here.
"""
