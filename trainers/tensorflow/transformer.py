"""A decoder-only Transformer language model (architectures.TRANSFORMER: GPT-2 small's layout) in
Keras, kept apart from models.py's image networks: the torch file's (trainers/torch/transformer.py)
layers, initialisation and output. Attention is Keras' MultiHeadAttention with use_causal_mask
(queries, keys and values each a width x width kernel with bias, as Flax's). Initializers are
configs, each layer drawing its own seed after the run's is set (models.py says why).
"""
import tensorflow as tf

from trainers.common import architectures as arch

keras = tf.keras
layers = keras.layers
NORMAL = {"class_name": "RandomNormal", "config": {"mean": 0.0, "stddev": arch.INIT_STD}}


class Table(layers.Layer):
    """A learned table of `rows` x `width`, used three ways: `lookup` (a token's vector), `positions`
    (each position's vector added to its input) and `scores` (the hidden states times the table: the
    output layer tied to the token embedding, as GPT-2's is; one weight, trained by both uses)."""

    def __init__(self, rows, width, **kwargs):
        super(Table, self).__init__(**kwargs)
        self.rows, self.width = rows, width

    def build(self, input_shape):
        self.table = self.add_weight(name="table", shape=(self.rows, self.width),
                                     initializer=keras.initializers.get(NORMAL))

    def call(self, x, use="lookup"):
        if use == "scores":
            return tf.matmul(x, tf.cast(self.table, x.dtype), transpose_b=True)
        if use == "positions":
            return x + tf.cast(self.table[:tf.shape(x)[1]], x.dtype)
        return tf.gather(tf.cast(self.table, self.compute_dtype), x)


def _block(x, shape):
    """One pre-LayerNorm block: x + attention(LN(x)), then x + MLP(LN(x))."""
    h = layers.LayerNormalization(epsilon=arch.LN_EPS)(x)
    attention = layers.MultiHeadAttention(shape.heads, shape.width // shape.heads, kernel_initializer=NORMAL)
    x = layers.Add()([x, attention(h, h, use_causal_mask=True)])
    h = layers.LayerNormalization(epsilon=arch.LN_EPS)(x)
    h = layers.Dense(arch.MLP_RATIO * shape.width, kernel_initializer=NORMAL)(h)
    h = layers.Activation(lambda y: tf.nn.gelu(y, approximate=True))(h)
    return layers.Add()([x, layers.Dense(shape.width, kernel_initializer=NORMAL)(h)])


def gpt(inputs, shape, context, vocabulary):
    """The scores [batch, positions, vocabulary] of a Transformer of `shape` on `inputs`, token ids."""
    wte = Table(vocabulary, shape.width)
    x = Table(context, shape.width)(wte(inputs), use="positions")
    for _ in range(shape.layers):
        x = _block(x, shape)
    x = layers.LayerNormalization(epsilon=arch.LN_EPS)(x)
    return layers.Activation("linear", dtype="float32")(wte(x, use="scores"))
