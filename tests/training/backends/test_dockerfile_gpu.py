"""Static checks of docker/Dockerfile.gpu: VERL's image, verl pinned, the image's torch left alone."""
from __future__ import annotations

import re
from pathlib import Path

DOCKERFILE = Path(__file__).resolve().parents[3] / "docker" / "Dockerfile.gpu"


def test_gpu_image_builds_on_verls_image_and_pins_verl():
    text = DOCKERFILE.read_text()
    assert re.search(r"^ARG VERL_IMAGE=verlai/verl:vllm", text, re.M)
    assert re.search(r"^FROM \$\{VERL_IMAGE\}", text, re.M)
    assert '"verl==0.9.1"' in text


def test_gpu_image_never_installs_a_torch_of_its_own():
    text = DOCKERFILE.read_text()
    installs = [line for line in text.splitlines() if "pip install" in line and not line.lstrip().startswith("#")]
    assert installs and all("-c /tmp/image-pins.txt" in line for line in installs)
    assert not re.search(r"pip install[^\n]*\btorch\b", text)
    assert "grep -viE '^(torch|verl|transformers)" in text  # the web image's torch pin is filtered out


def test_gpu_image_runs_the_celery_worker_on_the_gpu_queue():
    cmd = DOCKERFILE.read_text().strip().splitlines()[-1]
    assert cmd == 'CMD ["celery", "-A", "jobs", "worker", "-Q", "gpu", "--concurrency", "1", "-l", "info"]'
