"""`kernelwright generate PROBLEM...`: ask an LLM for ModelNew kernels, judge each answer, feed the verdict
back, and keep the best correct candidate per problem under `--out` (resumable; scored by `bench`)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from kernelwright.errors import UsageError
from kernelwright.output_paths import check_output_dir

if TYPE_CHECKING:
    from kernelwright.judge import JudgeOptions
    from kernelwright.llm.client import ChatClient
    from kernelwright.llm.loop import ProblemTask


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "generate", help="prompt an LLM for kernels, judge its answers, feed verdicts back, keep the best",
        description="Prompt an OpenAI-compatible chat endpoint for a ModelNew per problem; judge every "
                    "answer; send the verdict back for up to --turns turns; keep the best correct candidate.")
    parser.add_argument("problems", nargs="+", metavar="PROBLEM", help="problem files or bundled ids")
    parser.add_argument("--model", required=True, help="model name at the endpoint")
    parser.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL"),
                        help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1 "
                             "(default: $OPENAI_BASE_URL, else OpenAI's)")
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                        help="environment variable holding the API key (default OPENAI_API_KEY); the key "
                             "itself is never a flag, so it stays out of shell history and records")
    parser.add_argument("--samples", type=int, default=1, help="independent conversations per problem (1)")
    parser.add_argument("--turns", type=int, default=3, help="answers per conversation, with feedback (3)")
    parser.add_argument("--parallel", type=int, default=4, help="requests in flight at once (4)")
    parser.add_argument("--output-dir", "--out", dest="out", type=Path, metavar="DIR",
                        help="run folder (default runs/generate-<model>); reruns resume it, adding only "
                             "the missing work")
    parser.add_argument("--start-from", choices=["kernelwright"],
                        help="put `kernelwright optimize`'s ModelNew in the prompt as the starting point")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="where the judge runs answers (cpu: pure-PyTorch answers, correctness only)")
    parser.add_argument("--shrink", action="store_true", help="judge shrunk problems (fast CPU checks)")
    parser.add_argument("--ray", nargs="?", const="", metavar="ADDRESS",
                        help="judge the answers on a Ray cluster, --parallel at once (as in `bench --ray`)")
    parser.add_argument("--temperature", type=float, help="sampling temperature (default: the endpoint's)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per request (600)")
    parser.add_argument("--max-retries", type=int, default=5,
                        help="retries per request on connection errors, 429 and 5xx, with backoff (5)")
    parser.add_argument("--no-example", action="store_true",
                        help="leave the one-shot example out of the prompt")
    parser.set_defaults(func=run)


def run(args) -> int:
    # Imported here, not at the top: `openai` alone takes about a second to import, and every other verb
    # (and `kernelwright --help`) would pay for it.
    import torch
    from rich.console import Console

    from kernelwright.environment import gpu_info
    from kernelwright.judge import extract_code
    from kernelwright.llm.judging import JudgeSessions
    from kernelwright.llm.loop import GenerationLoop, LoopSettings
    from kernelwright.llm.records import RunRecords
    from kernelwright.llm.start import optimize_with_kernelwright
    from kernelwright.llm.view import LiveView

    for flag in ("samples", "turns", "parallel"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag} must be at least 1")
    if args.device == "cuda" and args.ray is None and not torch.cuda.is_available():
        raise UsageError("no CUDA GPU here: judge on the GPU machine, or pass --device cpu to judge "
                         "pure-PyTorch answers for correctness on the CPU")
    default_dir = Path("runs") / f"generate-{re.sub(r'[^A-Za-z0-9._-]+', '_', args.model)}"
    out_dir = check_output_dir(args.out or default_dir)
    tasks = load_tasks(args.problems)
    client = make_client(args)
    options = judge_options(args.device, args.shrink)
    records = RunRecords(out_dir)
    if args.ray is None:
        judge = JudgeSessions(options)
        gpu = gpu_info() if args.device == "cuda" else None
        hardware = gpu["name"] if gpu else None
    else:
        judge = ray_judge(args.ray, options)
        hardware = judge.hardware
    settings = LoopSettings(samples=args.samples, turns=args.turns, parallel=args.parallel,
                            temperature=args.temperature, require_speedup=args.device == "cuda",
                            include_example=not args.no_example, hardware=hardware)
    console = Console()
    view = LiveView(tasks, records, settings, console=console)
    client.on_retry = lambda reason, delay: view.note(f"{reason}: retrying in {delay:.1f} s")
    start = optimize_with_kernelwright if args.start_from == "kernelwright" else None
    with judge, view:
        loop = GenerationLoop(client, judge, extract_code, records, settings, observer=view,
                              starting_point=start)
        summary = loop.run(tasks)
    usage, candidates = summary["usage"], out_dir / "candidates"
    solved = [pid for pid, entry in summary["problems"].items() if entry["best"]]
    console.print(f"tokens: {usage['prompt_tokens']:,} prompt + {usage['completion_tokens']:,} completion "
                  f"= {usage['total_tokens']:,} (all runs in {out_dir})")
    console.print(f"{len(solved)}/{len(tasks)} problem(s) with a correct candidate in {candidates}; "
                  f"score them with `kernelwright bench --systems {candidates}`")
    return 0 if len(solved) == len(tasks) else 1


def load_tasks(specs: list[str]) -> list[ProblemTask]:
    from kernelwright.llm.loop import ProblemTask
    from kernelwright.problem import load_problem

    tasks: dict[str, ProblemTask] = {}
    for problem in map(load_problem, specs):
        known = tasks.get(problem.id)
        if known is not None and known.path.resolve() != problem.path.resolve():
            raise UsageError(f"{known.path} and {problem.path} share the problem id {problem.id!r}: their "
                             "candidates would overwrite each other; run them with different --out")
        tasks[problem.id] = ProblemTask(id=problem.id, path=problem.path, source=problem.source)
    return list(tasks.values())


def ray_judge(address: str, options: JudgeOptions):
    from kernelwright.llm.ray_judging import RayJudge

    return RayJudge.connect(address, options)


def make_client(args) -> ChatClient:
    from kernelwright.llm.client import ChatClient, RetryPolicy

    key = os.environ.get(args.api_key_env)
    if not key:
        if not args.base_url:
            raise UsageError(f"${args.api_key_env} is not set: export your API key there, or pass --base-url "
                             "for an endpoint that needs none")
        # Local servers (vLLM, llama.cpp, ...) accept any key, but the client insists on one.
        key = "unused"
    return ChatClient(model=args.model, base_url=args.base_url, api_key=key, timeout_s=args.timeout,
                      retry=RetryPolicy(retries=args.max_retries))


def judge_options(device: str, shrink: bool) -> JudgeOptions:
    from kernelwright.judge import JudgeOptions

    if device == "cpu":
        # CPU runs check correctness only: CPU timings say nothing about a CUDA kernel.
        return JudgeOptions(device="cpu", timing=False, compile_baseline=False, shrink=shrink)
    return JudgeOptions(device="cuda", shrink=shrink)
