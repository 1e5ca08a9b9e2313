"""The command that measures exercise 9's scaling curve (hvdcourse/course/exercises/measure_scaling.py), tiny settings."""

import json

from hvdcourse.course.exercises import measure_scaling


def test_writes_images_per_second_per_batch_and_worker_count_with_the_machine(tmp_path):
    out = tmp_path / "curve.json"
    assert (
        measure_scaling.main(
            [
                "--out",
                str(out),
                "--workers",
                "1",
                "--batch-sizes",
                "8,16",
                "--steps",
                "2",
                "--repeats",
                "1",
            ]
        )
        == 0
    )
    doc = json.loads(out.read_text())
    assert set(doc["curves"]) == {"8", "16"} and all(doc["curves"][b]["1"] > 0 for b in ("8", "16"))
    assert "cores" in doc["machine"] and doc["source"].startswith(
        "python -m hvdcourse.course.exercises.measure_scaling"
    )
