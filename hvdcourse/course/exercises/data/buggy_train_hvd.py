"""A Horovod training script with mistakes: the material of Exercise 11 (find the bugs).

Every mistake in it was made for real, three of them in the course's source material. Do not run
or copy it; the corrected script is hvdcourse/examples/train_hvd.py.
"""
import tensorflow as tf
import horovod.tensorflow.keras as hvd

from hvdcourse.examples import data, model as course_model

hvd.init()
mnist = data.load_mnist()
x_train, y_train = data.to_model_inputs(mnist.x_train, mnist.y_train)
x_test, y_test = data.to_model_inputs(mnist.x_test, mnist.y_test)

# every rank validates on its own part of the test set
x_test = data.shard(x_test, hvd.rank(), hvd.size())
y_test = data.shard(y_test, hvd.rank(), hvd.size())
# every rank trains on its own part of the training set
train_data = train_data.shard(num_shards=hvd.size(), index=hvd.rank())

lr = 1e-3
model = course_model.build_model()
optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.Adam(learning_rate=lr))
model.compile(optimizer=optimizer, loss=course_model.loss_fn(), metrics=["accuracy"])

callbacks = [
    hvd.callbacks.LearningRateWarmupCallback(lr=lr, warmup_epochs=3, verbose=1),
    tf.keras.callbacks.ModelCheckpoint("checkpoints/weights-{epoch}.h5", save_weights_only=True),
]
model.fit(x_train, y_train, batch_size=64, epochs=5, callbacks=callbacks,
          validation_data=(x_test, y_test), verbose=2)
