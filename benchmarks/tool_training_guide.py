"""verifiers' tool-training guide (its "Tool Training" script), on vfrl, with the real model and the local python tool.

    python benchmarks/tool_training_guide.py [--steps 3] [--model ./models/smollm2-135m-instruct]

The guide's script as written, with what this machine needs instead: the model is the embedded SmolLM2-135M-
Instruct (the guide's 7B SFT model is not here), its chat template with tool syntax (configs/templates/
smollm2_tool_calls.jinja) and vLLM's Hermes parser (docs/environments.md, "Tools"), and its hub math set becomes
generated arithmetic that asks for python (nothing is downloaded). Every `python` call runs in vfrl's local sandbox.
Prints the run directory, each step's reward, the tool calls made and the sandbox's answers seen by the model.
"""

import argparse
import json
import random
from pathlib import Path

import vfrl as vf
from vfrl.tools import python

ROOT = Path(__file__).resolve().parents[1]

# the guide's prompt, its example call written in the syntax this model's template and vLLM's parser use (Hermes)
TOOL_PROMPT = """
Think step-by-step, then either call a tool or give your final answer.

Tools can be called with JSON:
<tool_call>{"name": "python", "arguments": {"code": "print(2+2)"}}</tool_call>
"""


def math_rows(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        rows.append({"question": f"What is {a} * {b}? Use python to compute it.", "answer": str(a * b)})
    return rows


def correct_answer(completion, answer) -> float:
    text = completion[-1]["content"] or ""
    return float(answer in text.replace(",", ""))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--model", default=str(ROOT / "models" / "smollm2-135m-instruct"))
    a = p.parse_args()

    vf_env = vf.ToolEnv(
        dataset=math_rows(256),
        system_prompt=TOOL_PROMPT,
        tools=[python],
        max_turns=3,
        rubric=vf.Rubric(funcs=[correct_answer]),
    )
    model, tokenizer = vf.get_model_and_tokenizer(a.model)
    args = vf.grpo_defaults(run_name="math-tool-grpo")
    args.per_device_train_batch_size = 8
    args.num_generations = 8
    args.gradient_accumulation_steps = 2
    args.max_steps = a.steps
    args.max_completion_length = 96
    inference = {"args": {"dtype": "float32", "max_model_len": 2048, "enforce_eager": True,
                          "chat_template": str(ROOT / "configs" / "templates" / "smollm2_tool_calls.jinja"),
                          "enable_auto_tool_choice": True, "tool_call_parser": "hermes"}}
    with vf.GRPOTrainer(model=model, processing_class=tokenizer, env=vf_env, args=args,
                        peft_config=vf.lora_defaults(), inference=inference) as trainer:
        run_dir = Path(trainer.train())
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rollouts = [json.loads(line) for f in sorted((run_dir / "rollouts").glob("step_*.jsonl"))
                for line in f.read_text().splitlines()]
    tool_answers = [m["content"] for r in rollouts for m in r["completion"] if m["role"] == "tool"]
    print(json.dumps({"run_dir": str(run_dir), "steps": [m["step"] for m in metrics if "loss" in m],
                      "reward": [round(m["reward_mean"], 3) for m in metrics if "reward_mean" in m],
                      "rollouts": len(rollouts), "tool_calls": len(tool_answers),
                      "tool_answers": tool_answers[:5]}))


if __name__ == "__main__":
    main()
