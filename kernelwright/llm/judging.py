"""The judge as the generate loop uses it: one `Judge` session per problem, kept open across the turns and
samples of a run, so the reference model is loaded and timed (eager and torch.compile) once per problem
instead of once per answer."""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path

from kernelwright.judge import Judge, JudgeOptions

# Each open session holds a reference process with its inputs and outputs; a few cover the problems whose
# samples are in flight at once without piling up memory over a long suite.
MAX_OPEN_SESSIONS = 3


class JudgeSessions:
    """Callable as the loop's judge: `(problem file, candidate file) -> verdict`."""

    def __init__(self, options: JudgeOptions, max_open: int = MAX_OPEN_SESSIONS) -> None:
        self.options = options
        self.max_open = max_open
        self._sessions: OrderedDict[Path, Judge] = OrderedDict()
        # One judgement at a time: timings taken while another candidate runs on the same GPU are worthless.
        self._lock = threading.Lock()

    def __call__(self, problem_path: Path, candidate_path: Path) -> dict:
        with self._lock:
            return self._session(Path(problem_path).resolve()).evaluate(candidate_path)

    def _session(self, key: Path) -> Judge:
        if key in self._sessions:
            self._sessions.move_to_end(key)
            return self._sessions[key]
        while len(self._sessions) >= self.max_open:
            _, oldest = self._sessions.popitem(last=False)
            oldest.close()
        self._sessions[key] = Judge(key, self.options)
        return self._sessions[key]

    def close(self) -> None:
        with self._lock:
            while self._sessions:
                self._sessions.popitem()[1].close()

    def __enter__(self) -> JudgeSessions:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
