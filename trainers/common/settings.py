"""The settings that the benchmark grid and the trainer's command line both know, declared once:
each one's type, default and choices, so that a trainer run by hand measures what the grid's
cell of the same name does (the trainer's --iterations once defaulted to 100, the grid's to 50).

From this table come the trainer's flags and their defaults (protocol.build_parser) and the
choices and defaults of the orchestrator's cell settings (orchestrator/setting_registry.py);
conf/config.yaml, which YAML cannot derive, is held to it by tests/test_setting_registry.py.
The settings each run must name (model, dataset, batch size) or that only one side knows (the
trainer's --data-dir, --learning-rate, --loader-workers; the grid's framework and hardware) are
not here.

Trainers run in old containers (Python 3.6) where only `trainers/` is mounted, so this module
lives under trainers/common/ and imports nothing; the orchestrator imports it from here (as
failure_classes.py).
"""

PRECISIONS = ("fp32", "fp16", "bf16")
#: strong: the batch is global, split across devices; weak: the batch is each device's
SCALINGS = ("strong", "weak")
MODES = ("throughput", "accuracy")
# memory: the steps cycle batches prepared before timing; pipeline: each timed step takes its
# batch from the ImageNet loader (decode, crop, convert included), as real training does
INPUTS = ("memory", "pipeline")
# train: timed training steps; inference: timed forward passes in evaluation form
# (trainers/common/inference.py), counted by min_batches and min_seconds instead of iterations
PHASES = ("train", "inference")
# native: each framework's usual form, as before the setting existed (torch eager, TensorFlow's
# tf.function graph, JAX's jit, MXNet hybridized); eager: op by op, no graph; compiled: the
# framework's compiler (torch.compile, XLA's jit_compile, jax.jit, hybridize(static_alloc))
COMPILES = ("native", "eager", "compiled")
#: how a null value is spelled on the trainer's command line where the default is not null
NONE = "none"


class Setting(object):
    """One shared setting: `kind` (int, float, str), `default` (None: the trainer works it out,
    as threads from the CPUs it may use), `choices` (empty: any value of its kind), `help` (the
    trainer's --help line) and `nullable`: null is a value of its own though the default is not
    (target_accuracy: no target), given to the trainer as `--flag none` (NONE)."""

    __slots__ = ("name", "kind", "default", "choices", "help", "nullable")

    def __init__(self, name, kind, default, choices=(), help="", nullable=False):
        self.name = name
        self.kind = kind
        self.default = default
        self.choices = choices
        self.help = help
        self.nullable = nullable

    @property
    def flag(self):
        """The trainer's command-line flag: --target-accuracy for target_accuracy."""
        return "--" + self.name.replace("_", "-")

    def parse(self):
        """The flag's argparse type: its kind, and for a nullable setting also NONE (None)."""
        if not self.nullable:
            return self.kind
        kind = self.kind

        def parse(text):
            return None if text == NONE else kind(text)
        parse.__name__ = kind.__name__  # argparse's "invalid float value" names the kind
        return parse

    def __repr__(self):
        return "Setting(%r, default=%r)" % (self.name, self.default)


SETTINGS = (
    Setting("scaling", str, "strong", SCALINGS, "strong: --batch-size is global, split across the "
            "devices; weak: it is each device's"),
    Setting("iterations", int, 50, help="measured steps, after warm-up"),
    Setting("warmup", int, 10, help="steps run and timed but not measured"),
    Setting("gpus", int, 0, help="0 = CPU; GPUs per node"),
    Setting("nodes", int, 1, help="nodes the run spans (the job gives each node its place: "
            "TRAINER_NODES, TRAINER_NODE_RANK, TRAINER_NODE_ADDRS, TRAINER_PORT)"),
    Setting("threads", int, None, help="intra-op CPU threads (default: the CPUs this process may use)"),
    Setting("precision", str, "fp32", PRECISIONS),
    Setting("seed", int, 0),
    Setting("mode", str, "throughput", MODES, "throughput: timed steps on pooled batches; accuracy: "
            "--epochs passes over the training split, evaluated after each"),
    Setting("epochs", int, 10, help="accuracy mode: epochs"),
    Setting("target_accuracy", float, 0.9, help="accuracy mode: the test top-1 whose time and epochs "
            "are reported (%s: no target)" % NONE, nullable=True),
    Setting("seq_len", int, None, help="sequence networks (lstm, gpt): the tokens of each sequence, a "
            "Transformer's context (default: 32 for ptb, gpt's 1,024); no other network takes it"),
    Setting("layers", int, None, help="Transformers (gpt): blocks (default: GPT-2 small's 12); no other "
            "network takes it"),
    Setting("width", int, None, help="Transformers (gpt): channels, a multiple of --heads (default: 768)"),
    Setting("heads", int, None, help="Transformers (gpt): attention heads (default: 12)"),
    Setting("phase", str, "train", PHASES, "train: timed training steps; inference: timed forward "
            "passes (evaluation form, no gradients) until --min-batches and --min-seconds are both met"),
    Setting("min_batches", int, 64, help="inference: timed batches at least (train: ignored, "
            "--iterations counts its steps)"),
    Setting("min_seconds", float, 10.0, help="inference: measured seconds at least (train: ignored)"),
    Setting("compile", str, "native", COMPILES, "native: the framework's usual form; eager: op by op; "
            "compiled: torch.compile, XLA (jit_compile), jax.jit, MXNet hybridize(static_alloc)"),
    Setting("input", str, "memory", INPUTS, "memory: timed steps on batches prepared before timing; "
            "pipeline: each timed step takes the next batch from the loader (--dataset imagenet)"),
)
#: the settings that shape a Transformer (gpt), in architectures.Transformer's order
TRANSFORMER_SHAPE = ("layers", "width", "heads")
#: name -> its Setting
BY_NAME = dict((s.name, s) for s in SETTINGS)
#: name -> its default
DEFAULTS = dict((s.name, s.default) for s in SETTINGS)
