"""A Session over a training program (``Session.training``): the program's SDFG
holds the forward pass, the loss, the backward pass and the update, so every
transformation, the window, profiling and export work on it unchanged; this
class only keeps the parameters and the optimizer's state between steps."""
import numpy as np

from workbench.errors import BadInputError
from workbench.progress import SILENT
from workbench.session import Session
from workbench.training import OptimizerSettings, build_training


def open_training(ws, loss: str = "output", labels=None, params=None, optimizer: str = None,
                  lr: float = 0.01, output: str = None, batchnorm: str = "batch",
                  dropout: bool = False, weight_decay: float = None, momentum: float = 0.0,
                  betas=(0.9, 0.999), eps: float = 1e-8, progress=SILENT) -> "TrainingSession":
    from workbench.importer import import_model
    settings = None
    if optimizer is not None:
        decay = (0.01 if optimizer == "adamw" else 0.0) if weight_decay is None else weight_decay
        settings = OptimizerSettings(optimizer, lr, momentum, decay, tuple(betas), eps).check()
    with progress.phase("build the training program"):
        program = build_training(ws.model.reference_model, loss=loss, output=output, params=params,
                                 optimizer=settings, batchnorm=batchnorm, dropout=dropout,
                                 labels=labels or "labels")
    imported = import_model(program.model, name=f"{ws.name}_train", progress=progress)
    session = TrainingSession(imported, program, progress)
    session.reference_source = ws.model.reference_model
    return session


class TrainingSession(Session):
    """``step(batch)`` runs one training step and keeps the updated state;
    ``gradients(batch)`` (a program built without an optimizer) returns them."""

    def __init__(self, imported, program, progress=SILENT, build_slot: str = None):
        super().__init__(imported, progress, build_slot)
        self.program = program
        self._state = {k: np.array(v, copy=True) for k, v in program.state.items()}
        self.steps_taken = 0
        self.losses = []
        self.reference_source = None   # the user's model (fixed shapes) it was built from
        self._rng = np.random.default_rng(0)

    def save_program(self, path=None):
        """Write the training program as an ONNX model (parameters, state and
        hyper-parameters as inputs) and return its path; the window opens it like
        any model. Default: ``<cache>/training/<name>.onnx``."""
        import onnx
        from pathlib import Path
        from workbench.build.settings import cache_dir
        path = Path(path) if path else cache_dir() / "training" / f"{self.name}.onnx"
        path.parent.mkdir(parents=True, exist_ok=True)
        big = self.program.model.ByteSize() > 1_500_000_000
        onnx.save(self.program.model, str(path), save_as_external_data=big)
        return path

    def training_spec(self) -> dict:
        """What an exported program needs to take steps (``run.py --steps``): which
        output feeds which state input next, the hyper-parameters, the labels and
        the Dropout masks; the state itself goes to state.npz."""
        prog = self.program
        return {"next_state": dict(prog.next_state), "params": list(prog.params),
                "hyper": {k: float(v) for k, v in prog.hyper.items()},
                "step_input": next((k for k in prog.hyper if k.startswith("train_step")), None),
                "labels": list(prog.labels[:1]) + [list(prog.labels[2])] if prog.labels else None,
                "classes": prog.classes, "loss_kind": prog.loss_kind,
                "masks": [[name, list(shape), ratio] for name, shape, ratio in prog.masks],
                "data": list(prog.data), "steps_taken": self.steps_taken}

    @property
    def state(self) -> dict:
        """The parameters, the optimizer's moments and the step count as they are now:
        copies (between steps the state lives in memory the program shares with its
        worker process, which the next step overwrites)."""
        return {k: np.array(v, copy=True) for k, v in self._state.items()}

    @property
    def parameters(self) -> dict:
        return {p: np.array(self._state[p], copy=True) for p in self.program.params}

    def feeds(self, batch: dict, step: int = None) -> dict:
        """The program's inputs for ``batch`` (the model's inputs and the labels):
        the current state, the hyper-parameters and freshly drawn Dropout masks."""
        prog = self.program
        wanted = set(prog.data) | ({prog.labels[0]} if prog.labels else set())
        batch = dict(batch)
        if prog.labels and prog.labels[0] not in batch and "labels" in batch:
            batch[prog.labels[0]] = batch.pop("labels")
        missing = sorted(wanted - set(batch))
        unknown = sorted(set(batch) - wanted)
        if missing or unknown:
            raise BadInputError(f"a training batch holds {', '.join(sorted(wanted))}"
                                f"{'; missing ' + ', '.join(missing) if missing else ''}"
                                f"{'; unknown ' + ', '.join(unknown) if unknown else ''}")
        feeds = {**batch, **self._state}
        for name, shape, ratio in prog.masks:
            feeds[name] = (self._rng.random(shape) >= ratio).astype(np.float32)
        step = self.steps_taken + 1 if step is None else step
        for name, value in prog.hyper.items():
            feeds[name] = np.array(step if name.startswith("train_step") else value, np.float32)
        return feeds

    def step(self, batch: dict) -> float:
        """One training step; the state moves on; returns the loss (before the update)."""
        if self.program.optimizer is None:
            raise BadInputError("this training program has no optimizer; build it with "
                                "optimizer='sgd' or 'adamw' to take steps, or call gradients().")
        # the state stays with the program between steps: copying 85 MB of a BERT layer's
        # parameters and moments in and out took two thirds of its AdamW step
        out = self.run(self.feeds(batch), carry=self.program.next_state)
        for name in self.program.next_state:
            self._state[name] = out[name]
        self.steps_taken += 1
        loss = float(np.asarray(out["loss"]).reshape(()))
        self.losses.append(loss)
        return loss

    def gradients(self, batch: dict) -> dict:
        """The loss and every parameter's gradient at the current state."""
        if not self.program.gradients:
            raise BadInputError("this training program updates its parameters; build it "
                                "without an optimizer to read gradients.")
        out = self.run(self.feeds(batch))
        grads = {p: out[g] for p, g in self.program.gradients.items()}
        return {"loss": float(np.asarray(out["loss"]).reshape(())), **grads}

    def batch_from(self, arrays: dict) -> dict:
        """A batch from user arrays (an .npz): the model's inputs and the labels
        (named 'labels' or as the program names them); missing labels are drawn."""
        batch = dict(arrays)
        prog = self.program
        if prog.labels and prog.labels[0] not in batch:
            if "labels" in batch:
                batch[prog.labels[0]] = batch.pop("labels")
            else:
                batch[prog.labels[0]] = self.random_batch()[prog.labels[0]]
        infos = {i.onnx_name: i for i in self.inputs}
        for name in list(batch):
            if name in infos:
                batch[name] = np.asarray(batch[name]).astype(infos[name].dtype, copy=False)
        return batch

    def random_batch(self, seed: int = 0) -> dict:
        """Seeded data inputs and labels (class indices in range for cross entropy)."""
        rng = np.random.default_rng(seed)
        batch = {}
        for info in self.inputs:
            if info.onnx_name in self.program.data:
                batch[info.onnx_name] = _random(rng, info.shape, info.dtype)
        if self.program.labels:
            name, _, shape = self.program.labels
            if self.program.loss_kind == "cross_entropy":
                classes = self.program.classes
                batch[name] = rng.integers(0, classes, shape).astype(np.int64)
            else:
                batch[name] = rng.standard_normal(shape).astype(np.float32)
        return batch

    def random_inputs(self, seed: int = 0, sizes: dict = None) -> dict:
        """What ``verify`` and the step checks run: a random batch at the current state.
        ``sizes`` is for symbolic programs; a training program has fixed sizes."""
        return self.feeds(self.random_batch(seed))


def _random(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) > 0.5
    return rng.integers(0, 2, shape).astype(dtype)
