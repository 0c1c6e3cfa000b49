"""Runs an entry script inside `accelerate launch` for tests/test_distributed*.py, and records what each process's
model looked like once prepared: `<output_dir>/prepared-rank<R>.json` (which parameters are DTensors, their local and
full shapes, whether the tied embedding and head are still one parameter with one storage, how many tensors the
optimizer updates).

    accelerate launch ... tests/distributed_driver.py train.pretrain_gpt [--fail_on_rank R --fail_at_step S] ARGS

`--fail_on_rank R --fail_at_step S` raises a RuntimeError in process R's forward of optimizer step S.
"""

import importlib
import json
import sys
from pathlib import Path

from train.run.engine import Engine


def _inspect(engine: Engine) -> dict:
    from torch.distributed.tensor import DTensor

    model = engine.accelerator.unwrap_model(engine.model)
    params = dict(model.named_parameters())
    source, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    local = (lambda p: p.to_local()) if isinstance(source, DTensor) else (lambda p: p)
    updated = [p for group in engine.optimizer.param_groups for p in group["params"]]
    return {
        "sharded": {n: [list(p.to_local().shape), list(p.shape)] for n, p in params.items() if isinstance(p, DTensor)},
        "plain": [n for n, p in params.items() if not isinstance(p, DTensor)],
        "tied": head is source,
        "one_storage": local(head).untyped_storage().data_ptr() == local(source).untyped_storage().data_ptr(),
        "optimizer_tensors": len(updated), "distinct_optimizer_tensors": len({id(p) for p in updated}),
    }


def main() -> None:
    module, args = sys.argv[1], sys.argv[2:]
    fail_rank = fail_step = None
    if "--fail_on_rank" in args:
        i = args.index("--fail_on_rank")
        fail_rank, fail_step, args = int(args[i + 1]), int(args[i + 3]), args[:i] + args[i + 4:]
    train, compute_loss = Engine.train, Engine._compute_loss

    def inspecting_train(engine: Engine):
        record = _inspect(engine)
        path = Path(engine.recipe.output_dir) / f"prepared-rank{engine.accelerator.process_index}.json"
        path.write_text(json.dumps(record))
        return train(engine)

    def failing_compute_loss(engine: Engine, batch: dict):
        if engine.accelerator.process_index == fail_rank and engine.state.step + 1 == fail_step:
            raise RuntimeError(f"injected failure in the batch of step {fail_step}")
        return compute_loss(engine, batch)

    Engine.train, Engine._compute_loss = inspecting_train, failing_compute_loss
    importlib.import_module(module).main(args)


if __name__ == "__main__":
    main()
