"""Checks of exercises 5-7 (hvdcourse/course/exercises/checks_training.py) on 2 ranks: a naive conversion gets
the intended findings. (Right answers: the solution notebooks; bob's ex06/ex07 mistakes: the grader test.)"""

from hvdcourse.examples import data
from hvdcourse.course.exercises import checks_training as checks


def test_ex05_unconverted_script_fails_everything_but_running():
    def train_hvd(epochs=2, batch_size=16, lr=1e-3, max_steps=3, checkpoint_dir="checkpoints"):
        import os

        import horovod.tensorflow.keras as hvd
        import tensorflow as tf

        from hvdcourse.examples import data, model as course_model, training

        hvd.init()  # and nothing else of the six steps
        mnist = data.load_mnist(quiet=True)
        x_train, y_train = data.to_model_inputs(mnist.x_train, mnist.y_train)
        model = course_model.build_model()
        model.compile(optimizer=tf.keras.optimizers.Adam(lr), loss=course_model.loss_fn())
        os.makedirs(checkpoint_dir, exist_ok=True)
        callbacks = [
            tf.keras.callbacks.ModelCheckpoint(
                os.path.join(checkpoint_dir, "w-{epoch}.h5"), save_weights_only=True
            )
        ]
        model.fit(
            training.train_dataset(x_train, y_train, batch_size, seed=42),
            steps_per_epoch=max_steps,
            epochs=epochs,
            callbacks=callbacks,
            verbose=0,
        )
        return model, x_train

    result = checks.ex05_conversion(train_hvd, quiet=True)
    by_text = {f.criterion: f for f in result.findings}
    assert result.score == 1 and by_text["trains on 2 ranks and returns (model, x_train)"].passed
    assert (
        "BroadcastGlobalVariablesCallback(0)"
        in by_text["after the first step both ranks hold rank 0's weights (broadcast)"].hint
    )
    # no sharding: each rank trained on all of it
    n_train = len(data.load_mnist(quiet=True).x_train)
    assert (
        f"{n_train} examples, rank 1 on {n_train}"
        in by_text[
            "the ranks trained on disjoint parts that together are the whole training set"
        ].detail
    )
    assert (
        "still the single-worker one"
        in by_text[
            "the learning rate is scaled for the number of workers (Adam: by its square root)"
        ].hint
    )
    assert "rank 1 wrote" in by_text["only rank 0 wrote checkpoint files"].detail
