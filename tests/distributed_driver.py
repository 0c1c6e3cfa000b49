"""Runs an entry script inside `accelerate launch` (or `torchrun`) for tests/train/run/test_distributed*.py and
test_multinode.py, and records what each process's model looked like once prepared: `prepared-rank<R>.json` in the
output folder, or in `--record_to DIR` (which parameters are DTensors, their local and full shapes, whether the tied
embedding and head are still one parameter with one storage, how many tensors the optimizer updates; under DeepSpeed
which parameters ZeRO-3 partitioned, with the elements this process holds and their full count, and the tie).

    accelerate launch ... tests/distributed_driver.py train.pretrain_gpt [--fail_on_rank R --fail_at_step S]
        [--record_to DIR] [--resume_to N] ARGS

`--fail_on_rank R --fail_at_step S` raises a RuntimeError in process R's forward of optimizer step S. `--record_to DIR`
also writes there `tokenized-rank<R>.json`, the documents each process tokenized into causal-LM blocks. `--resume_to N`
runs the script a second time in the same processes, resumed from its latest checkpoint up to step N.
"""

import importlib
import json
import os
import sys
from pathlib import Path

from train.data import encoders
from train.run.engine import Engine


def _inspect(engine: Engine) -> dict:
    from torch.distributed.tensor import DTensor

    model = engine.accelerator.unwrap_model(engine.model)
    params = dict(model.named_parameters())
    source, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    if engine.accelerator.distributed_type.name == "DEEPSPEED":  # ZeRO-3 partitions a parameter into its `ds_tensor`
        return {"partitioned": {n: [p.ds_tensor.numel(), p.ds_numel] for n, p in params.items()
                                if hasattr(p, "ds_tensor")},
                "plain": [n for n, p in params.items() if not hasattr(p, "ds_tensor")], "tied": head is source}
    local = (lambda p: p.to_local()) if isinstance(source, DTensor) else (lambda p: p)
    updated = [p for group in engine.optimizer.param_groups for p in group["params"]]
    return {
        "sharded": {n: [list(p.to_local().shape), list(p.shape)] for n, p in params.items() if isinstance(p, DTensor)},
        "plain": [n for n, p in params.items() if not isinstance(p, DTensor)],
        "tied": head is source,
        "one_storage": local(head).untyped_storage().data_ptr() == local(source).untyped_storage().data_ptr(),
        "optimizer_tensors": len(updated), "distinct_optimizer_tensors": len({id(p) for p in updated}),
    }


def _option(args: list[str], name: str, values: int = 1) -> tuple[list[str], list[str] | None]:
    """`args` without `name` and its values, and the values (None: not given)."""
    if name not in args:
        return args, None
    i = args.index(name)
    return args[:i] + args[i + 1 + values:], args[i + 1:i + 1 + values]


def main() -> None:
    module, args = sys.argv[1], sys.argv[2:]
    args, failure = _option(args, "--fail_on_rank", 3)
    fail_rank, fail_step = (int(failure[0]), int(failure[2])) if failure else (None, None)
    args, record_to = _option(args, "--record_to")
    args, resume_to = _option(args, "--resume_to")
    train, compute_loss, encode = Engine.train, Engine._compute_loss, encoders.encode_causal_lm
    tokenized = []

    def inspecting_train(engine: Engine):
        folder = Path(record_to[0]) if record_to else Path(engine.recipe.output_dir)
        (folder / f"prepared-rank{engine.accelerator.process_index}.json").write_text(json.dumps(_inspect(engine)))
        return train(engine)

    def failing_compute_loss(engine: Engine, batch: dict):
        if engine.accelerator.process_index == fail_rank and engine.state.step + 1 == fail_step:
            raise RuntimeError(f"injected failure in the batch of step {fail_step}")
        return compute_loss(engine, batch)

    def counting_encode(rows: dict, tokenizer, text_column: str = "text") -> dict:
        tokenized.extend(rows[text_column])
        return encode(rows, tokenizer, text_column)

    Engine.train, Engine._compute_loss = inspecting_train, failing_compute_loss
    encoders.encode_causal_lm = counting_encode
    importlib.import_module(module).main(args)
    if resume_to:
        importlib.import_module(module).main([*args, "--max_steps", resume_to[0], "--resume_from_checkpoint", "latest"])
    if record_to:
        (Path(record_to[0]) / f"tokenized-rank{os.environ.get('RANK', '0')}.json").write_text(json.dumps(tokenized))


if __name__ == "__main__":
    main()
