"""Published benchmark figures the course discusses, transcribed as data (lesson: Measuring performance).

* Sergeev & Del Balso (2018), *Horovod: fast and easy distributed deep learning in TensorFlow*
  (arXiv:1802.05799): about 88% scaling efficiency for Inception V3 and ResNet-101 on 128 Pascal
  GPUs, over plain TCP on 25 Gbit/s Ethernet (RDMA's gain is a separate figure), about twice what
  standard distributed TensorFlow (parameter servers) reached; Horovod's
  documentation later quotes 90% (Inception V3, ResNet-101) and 68% (VGG-16) on 512 GPUs. Both are
  *weak scaling* with synthetic data (tf_cnn_benchmarks; the documented command uses 64 images per GPU).
* The Horovod-and-Ray benchmark (Dey & Banerjee, *Benchmarking Horovod and Ray for Distributed DNN
  training on GPU cluster*, 2022):
  1 vs 2 GPUs, batch 32, training time, test accuracy and images/s, transcribed as printed.
"""

from __future__ import annotations

from hvdcourse.course.lessons import sources

SERGEEV_2018 = {
    "source": "Sergeev & Del Balso 2018, arXiv:1802.05799; Horovod documentation (benchmarks page)",
    "hardware": "servers with 4 NVIDIA Pascal GPUs each, 25 Gbit/s Ethernet, RoCE-capable (the paper's 88%: "
    "over plain TCP)",
    "workload": "tf_cnn_benchmarks, synthetic ImageNet-sized data, fixed batch per GPU (the documented "
    "command uses 64): weak scaling",
    "efficiency": {
        "Inception V3 / ResNet-101, 128 GPUs (paper)": 0.88,
        "Inception V3 / ResNet-101, 512 GPUs (docs)": 0.90,
        "VGG-16, 512 GPUs (docs)": 0.68,
    },
}

ELKH_CLOUD = {
    "source": sources.cite("elkh_cloud"),
    "hardware": "1-8 virtual machines, each 16 vCPU, 64 GB RAM, one NVIDIA V100 32 GB, 10 Gbit/s network",
    "workload": "official TensorFlow benchmark scripts, ResNet models, CIFAR-10 and ImageNet, "
    "batch 32 (default) and 196 (largest that fits)",
    "measured": "images/s, scaling efficiency, accuracy (ResNet-101 on ImageNet to 75% top-1 on 8 nodes)",
}

# The Horovod-and-Ray benchmark's tables, exactly as printed. Keys: (framework, workload, node) -> (1 GPU, 2 GPUs).
# as the slides describe them: neither node's GPU link (PCIe or NVLink) is stated
HOROVOD_RAY_NODES = {"Node 5": "2x Titan RTX, 2x AMD EPYC", "Node 9": "4x V100, Intel Xeon, Optane"}
HOROVOD_RAY_WORKLOADS = {
    "RN50+MNIST": "ResNet-50 on MNIST",
    "MN+F-MNIST": "MobileNetV2 on Fashion-MNIST",
}
HOROVOD_RAY_TRAINING_IMAGES = 60000
HOROVOD_RAY = {
    "training_time_s": {
        ("Ray Train", "RN50+MNIST", "Node 5"): (4.0798, 2.789),
        ("Ray Train", "RN50+MNIST", "Node 9"): (3.353, 1.848),
        ("Ray Train", "MN+F-MNIST", "Node 5"): (0.817, 0.654),
        ("Ray Train", "MN+F-MNIST", "Node 9"): (0.792, 0.808),
        ("Horovod", "RN50+MNIST", "Node 5"): (4.132, 3.4474),
        ("Horovod", "RN50+MNIST", "Node 9"): (3.0, 3.7002),
        ("Horovod", "MN+F-MNIST", "Node 5"): (0.691, 0.6409),
        ("Horovod", "MN+F-MNIST", "Node 9"): (0.614, 0.936),
    },
    "test_accuracy": {
        ("Ray Train", "RN50+MNIST", "Node 5"): (0.9883, 0.9922),
        ("Ray Train", "RN50+MNIST", "Node 9"): (0.99, 0.99),
        ("Ray Train", "MN+F-MNIST", "Node 5"): (0.6951, 0.47),
        ("Ray Train", "MN+F-MNIST", "Node 9"): (0.5802, 0.7498),
        ("Horovod", "RN50+MNIST", "Node 5"): (90.2, 90.4),
        ("Horovod", "RN50+MNIST", "Node 9"): (90.3, 90.3),
        ("Horovod", "MN+F-MNIST", "Node 5"): (72.9, 72.0),
        ("Horovod", "MN+F-MNIST", "Node 9"): (72.2, 71.8),
    },
    "images_per_s": {
        ("Ray Train", "RN50+MNIST", "Node 5"): (14706, 21513),
        ("Ray Train", "RN50+MNIST", "Node 9"): (17894, 32467),
        ("Ray Train", "MN+F-MNIST", "Node 5"): (73739, 91743),
        ("Ray Train", "MN+F-MNIST", "Node 9"): (75757, 74257),
        ("Horovod", "RN50+MNIST", "Node 5"): (14520, 17404),
        ("Horovod", "RN50+MNIST", "Node 9"): (17400, 16215),
        ("Horovod", "MN+F-MNIST", "Node 5"): (86830, 93618),
        ("Horovod", "MN+F-MNIST", "Node 9"): (93618, 64102),
    },
}


def as_fraction(accuracy: float) -> float:
    """The Horovod-and-Ray benchmark prints Ray's accuracy as a fraction (0.99) and Horovod's in percent (90.2): one unit."""
    return accuracy / 100 if accuracy > 1 else accuracy


def horovod_ray_table():
    """The Horovod-and-Ray benchmark's tables as one pandas frame, with the speedups and consistency checks computed.

    ``images/s from time`` = 60,000 training images / training time: where it matches the printed
    images/s, the printed images/s is not a separate measurement but one epoch's time inverted.
    """
    import pandas as pd

    rows = []
    for key, (t1, t2) in HOROVOD_RAY["training_time_s"].items():
        framework, workload, node = key
        r1, r2 = HOROVOD_RAY["images_per_s"][key]
        a1, a2 = HOROVOD_RAY["test_accuracy"][key]
        rows.append(
            {
                "framework": framework,
                "workload": workload,
                "node": node,
                "time 1 GPU (s)": t1,
                "time 2 GPUs (s)": t2,
                "speedup (time)": round(t1 / t2, 2),
                "images/s 1 GPU": r1,
                "images/s 2 GPUs": r2,
                "speedup (images/s)": round(r2 / r1, 2),
                "60000/time 1 GPU": round(HOROVOD_RAY_TRAINING_IMAGES / t1),
                "60000/time 2 GPUs": round(HOROVOD_RAY_TRAINING_IMAGES / t2),
                "accuracy 1 GPU": as_fraction(a1),
                "accuracy 2 GPUs": as_fraction(a2),
            }
        )
    return pd.DataFrame(rows)


def count_source_models() -> list:
    """Parameters and layers of the Horovod-and-Ray benchmark's models (and the VGG16 it could not
    fit), counted on Keras' own definitions built with ``weights=None`` (nothing is downloaded)
    (lesson: What the source documents get wrong).

    One row per model: ``params``; ``conv`` (convolutions, depthwise ones included),
    ``shortcut_conv`` (of them, ResNet's 1x1 projections on the shortcut paths), ``dense``,
    ``pooling`` layers; ``depth``: the layers with weights on the longest path (conv - shortcut_conv
    + dense), the number in a model's name.
    """
    import tensorflow as tf

    apps, layers = tf.keras.applications, tf.keras.layers
    builders = {
        "ResNet-50, 10 classes": lambda: apps.ResNet50(weights=None, classes=10),
        "MobileNetV2, 10 classes": lambda: apps.MobileNetV2(weights=None, classes=10),
        "VGG16, 1000 classes": lambda: apps.VGG16(weights=None),
    }
    pools = (layers.MaxPooling2D, layers.AveragePooling2D, layers.GlobalAveragePooling2D)
    rows = []
    for name, build in builders.items():
        model = build()
        convs = [x for x in model.layers if isinstance(x, (layers.Conv2D, layers.DepthwiseConv2D))]
        shortcut = sum(1 for x in convs if x.name.endswith("_0_conv"))
        dense = sum(1 for x in model.layers if isinstance(x, layers.Dense))
        rows.append(
            {
                "model": name,
                "params": model.count_params(),
                "conv": len(convs),
                "shortcut_conv": shortcut,
                "dense": dense,
                "pooling": sum(1 for x in model.layers if isinstance(x, pools)),
                "depth": len(convs) - shortcut + dense,
            }
        )
        del model
        tf.keras.backend.clear_session()
    return rows
