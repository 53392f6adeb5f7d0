"""`kernelwright generate`: an LLM writes ModelNew candidates, the judge rates them, the verdict goes back.

- `client.py`: chat completions on any OpenAI-compatible endpoint (timeouts, backoff, 429, clear errors)
- `loop.py`: samples x turns, stop on success, parallel requests, resume from the records
- `feedback.py`: the judge's verdict as the next turn's message
- `records.py`: the run folder (JSONL of every turn, attempts, best candidates in the bench layout)
- `start.py`: `--start-from kernelwright`, our compiler's output as the starting point
- `view.py`: the rich live view
"""
