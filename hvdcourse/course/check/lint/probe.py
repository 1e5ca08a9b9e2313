"""What each rank runs under ``hvdcourse-lint --run``: the learner's script, watched (lesson:
Converting a Keras MNIST script to Horovod).

``python -m hvdcourse.course.check.lint.probe --steps N --workdir DIR SCRIPT [ARGS...]`` moves
into the rank's own folder (``DIR/rank-R``, which :mod:`~hvdcourse.course.check.lint.run` fills
with links to the files of the learner's folder), runs the script as ``__main__`` and records,
without changing what it computes:

* a digest of the weights before the first training step (after any broadcast; PyTorch) and after
  each step (PyTorch's optimizer hooks; Keras: a callback added to ``fit``, after Horovod's);
* a digest of the first input of each step (PyTorch: a forward pre-hook on every module; Keras:
  ``train_step``'s batch), to compare the ranks' data;
* every file the rank opens for writing from Python (an audit hook), with the script's line.

After ``N`` steps it ends the training on every rank at the same step, gently, so that what the
script does after its loop (the checkpoint of the epoch, the final save) still runs: Keras' ``fit``
stops (``model.stop_training``), and a PyTorch ``DataLoader`` ends the loop that reads it (and gives
each later pass one batch, an evaluation too). A loop the probe cannot end so is stopped at
``10 x N`` steps (a ``BaseException`` the script's own ``except Exception`` does not catch). The
record goes back through :mod:`hvdcourse.runtime.results`. An exception before the first step
becomes one line saying why the script cannot run here (a GPU, a file that is not here, a module
that is not installed).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.abc
import os
import runpy
import sys
import tempfile
import time

from hvdcourse.runtime import results
from hvdcourse.runtime.ranks import launcher_rank

KIND = "hvdlint-run"
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


class StepLimit(BaseException):
    """Raised on every rank after the same number of steps: the run has what it needs."""


class Probe:
    """The record of one rank, filled by the hooks."""

    def __init__(self, script: str, steps: int, ignore: tuple = (), keep: str = ""):
        self.script = os.path.abspath(script)
        self.limit = steps
        self.hard_limit = 10 * steps  # a loop the probe cannot end gently
        self.ignore = tuple(os.path.abspath(p) for p in ignore)
        self.keep = os.path.abspath(keep) if keep else ""
        self.record = {
            "kind": KIND,
            "rank": launcher_rank(),
            "weights": [],  # [step, digest, line]: step 0 is before the first update
            "data": [],  # [step, digest, line]
            "written": [],  # [path, line]
            "steps": 0,
            "error": None,
            "framework": None,
        }
        self.depth = 0
        self.want_data = True
        self.started = time.monotonic()

    # ------------------------------------------------------------------ where in the script
    def script_line(self) -> int | None:
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_filename == self.script:
                return frame.f_lineno
            frame = frame.f_back
        return None

    def from_horovod_internals(self) -> bool:
        """Whether the current call comes from Horovod's broadcast_optimizer_state (its zero
        step that creates the optimizer's state)."""
        frame = sys._getframe(1)
        while frame is not None:
            name = frame.f_code.co_filename.replace(os.sep, "/")
            if name.endswith("horovod/torch/functions.py"):
                return True
            frame = frame.f_back
        return False

    # ------------------------------------------------------------------ files
    def audit(self, event: str, args) -> None:
        if event != "open" or not args:
            return
        path, mode = args[0], args[1] if len(args) > 1 else None
        flags = args[2] if len(args) > 2 else 0
        writing = (isinstance(mode, str) and bool(set(mode) & set("wax+"))) or (
            mode is None and isinstance(flags, int) and flags & WRITE_FLAGS
        )
        if not writing or not isinstance(path, (str, bytes)):
            return
        if isinstance(path, bytes):
            path = path.decode(errors="replace")
        full = os.path.abspath(path)
        if full.endswith((".pyc", ".pyc.tmp")):
            return
        if full.startswith(self.ignore) and not (self.keep and full.startswith(self.keep)):
            return
        if any(full == p for p, _ in self.record["written"]):
            return
        self.record["written"].append([full, self.script_line()])

    def wrote(self, path) -> None:
        """A library call that writes ``path`` outside Python's ``open`` (no audit event)."""
        if isinstance(path, (str, bytes, os.PathLike)):
            self.audit("open", (os.fspath(path), "w", 0))

    # ------------------------------------------------------------------ PyTorch
    def torch_loaded(self, torch) -> None:
        from torch.nn.modules.module import register_module_forward_pre_hook
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        self.record["framework"] = "torch"

        def digest_params(optimizer) -> str:
            h = hashlib.sha256()
            with torch.no_grad():
                for group in optimizer.param_groups:
                    for p in group["params"]:
                        h.update(p.detach().cpu().contiguous().numpy().tobytes())
            return h.hexdigest()[:16]

        def pre(optimizer, args, kwargs):
            self.depth += 1
            if self.depth == 1 and not self.from_horovod_internals():
                if self.record["steps"] == 0:
                    line = self.script_line()
                    self.record["weights"].append([0, digest_params(optimizer), line])

        def post(optimizer, args, kwargs):
            self.depth -= 1
            if self.depth == 0 and not self.from_horovod_internals():
                self.record["steps"] += 1
                step = self.record["steps"]
                self.record["weights"].append([step, digest_params(optimizer), self.script_line()])
                self.want_data = True
                if step >= self.hard_limit:
                    raise StepLimit()

        def forward(module, args):
            if not self.want_data or not module.training:
                return
            tensor = next((a for a in args if isinstance(a, torch.Tensor)), None)
            if tensor is None:
                return
            self.want_data = False
            data = tensor.detach().cpu().contiguous().numpy().tobytes()
            self.record["data"].append(
                [self.record["steps"], hashlib.sha256(data).hexdigest()[:16], self.script_line()]
            )

        save = torch.save

        def watched_save(obj, f, *args, **kwargs):  # torch.save writes from C++: no audit event
            self.wrote(f)
            return save(obj, f, *args, **kwargs)

        torch.save = watched_save
        self.limit_loaders(torch.utils.data.DataLoader)
        register_optimizer_step_pre_hook(pre)
        register_optimizer_step_post_hook(post)
        register_module_forward_pre_hook(forward)

    def limit_loaders(self, loader_class) -> None:
        """Past the step limit a ``DataLoader`` pass ends before its next batch (a pass that
        starts then gives one batch): the training loop ends, what follows it runs."""
        original = loader_class.__iter__
        probe = self

        def limited(loader):
            iterator = original(loader)

            def batches():
                given = 0
                for batch in iterator:
                    if given and probe.record["steps"] >= probe.limit:
                        return
                    given += 1
                    yield batch

            return batches()

        loader_class.__iter__ = limited

    # ------------------------------------------------------------------ Keras (tf-keras)
    def keras_loaded(self, keras) -> None:
        import numpy as np
        import tensorflow as tf

        self.record["framework"] = "keras"
        probe = self

        class Watch(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                probe.record["steps"] += 1
                step = probe.record["steps"]
                h = hashlib.sha256()
                for weight in self.model.get_weights():
                    h.update(weight.tobytes())
                probe.record["weights"].append([step, h.hexdigest()[:16], None])
                if step >= probe.limit:
                    self.model.stop_training = True  # fit ends after this batch's epoch end
                if step >= probe.hard_limit:
                    raise StepLimit()

        fit, train_step = keras.Model.fit, keras.Model.train_step

        for method in ("save", "save_weights"):  # HDF5 and TensorFlow write from C++

            def watched(model, filepath, *args, _original=getattr(keras.Model, method), **kwargs):
                probe.wrote(filepath)
                return _original(model, filepath, *args, **kwargs)

            setattr(keras.Model, method, watched)

        def watched_fit(model, *args, **kwargs):
            callbacks = list(kwargs.get("callbacks") or [])
            kwargs["callbacks"] = callbacks + [Watch()]  # after Horovod's broadcast
            probe.record["weights_line"] = probe.script_line()
            return fit(model, *args, **kwargs)

        def record_batch(x):
            if len(probe.record["data"]) <= probe.record["steps"]:
                data = hashlib.sha256(x.tobytes()).hexdigest()[:16]
                probe.record["data"].append([probe.record["steps"], data, None])
            return np.int32(0)

        def watched_train_step(model, data):
            first = tf.nest.flatten(data)[0]
            tf.numpy_function(record_batch, [first], tf.int32)  # runs at every step
            return train_step(model, data)

        keras.Model.fit = watched_fit
        keras.Model.train_step = watched_train_step

    # ------------------------------------------------------------------ running
    def run(self, argv: list) -> int:
        sys.argv = [self.script, *argv]
        sys.path.insert(0, os.path.dirname(self.script))
        sys.addaudithook(self.audit)
        sys.meta_path.insert(
            0, AfterImport({"torch": self.torch_loaded, "tf_keras": self.keras_loaded})
        )
        code = 0
        try:
            runpy.run_path(self.script, run_name="__main__")
        except StepLimit:
            pass
        except SystemExit as end:
            code = end.code if isinstance(end.code, int) else (0 if end.code is None else 1)
            if code and self.record["steps"] == 0:
                self.record["error"] = f"it exited with status {code} before its first step"
        except BaseException as err:  # the learner's script: anything may come out of it
            if self.record["steps"] == 0:
                self.record["error"] = why_not(err)
                code = 3
            else:  # after some steps: what the steps showed still counts
                self.record["ended"] = why_not(err)
        self.record["seconds"] = round(time.monotonic() - self.started, 2)
        results.report(self.record)
        return code


class AfterImport(importlib.abc.MetaPathFinder):
    """Call ``hooks[name](module)`` once the module ``name`` is imported (PyTorch, tf-keras): the
    probe patches only the framework the script loads, when it loads it."""

    def __init__(self, hooks: dict):
        self.hooks = dict(hooks)

    def find_spec(self, name, path, target=None):
        if name not in self.hooks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader, hooks = spec.loader, self.hooks
        original = loader.exec_module

        def exec_module(module):
            original(module)
            hook = hooks.pop(name, None)  # once: a find_spec alone (a check) imports nothing
            if hook is not None:
                try:
                    hook(module)
                except Exception as err:  # the probe must never break the learner's script
                    print(f"[hvdlint] cannot watch {name}: {err}", file=sys.stderr)

        loader.exec_module = exec_module
        return spec


def why_not(err: BaseException) -> str:
    """One line: why the script cannot run here."""
    text = " ".join(str(err).split())[:200]
    if isinstance(err, ModuleNotFoundError):
        return f"it imports {err.name}, which is not installed in this environment"
    if isinstance(err, FileNotFoundError):
        return f"it needs {err.filename or text}, which is not on this machine"
    lowered = text.lower()
    if any(word in lowered for word in ("cuda", "nccl", "gpu", "cudnn")):
        return f"it needs a GPU ({type(err).__name__}: {text})"
    return f"it stopped with {type(err).__name__}: {text}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Run a training script on this rank, watched.")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--workdir", required=True)
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    script = os.path.abspath(args.script)
    rank_dir = os.path.join(args.workdir, f"rank-{launcher_rank()}")
    os.chdir(rank_dir)
    # the libraries' own files (caches, temporary files, this run's results), not the script's
    ignore = (os.environ.get(results.VARIABLE, "/nonexistent"), "/dev", "/proc", "/sys")
    ignore += (sys.prefix, os.path.expanduser("~/.cache"), os.path.expanduser("~/.keras"))
    ignore += (tempfile.gettempdir(),)
    return Probe(script, args.steps, ignore, keep=args.workdir).run(args.args)


if __name__ == "__main__":
    sys.exit(main())
