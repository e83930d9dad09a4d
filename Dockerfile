# syntax=docker/dockerfile:1.7
# verl-p40: PPO post-training with verl 0.5.0 on old and small NVIDIA GPUs (Tesla P40 first).
# Stages: python-base (CUDA 11.8 devel + Python 3.10 + torch cu118) -> apex (wheel) and verl (patched wheel)
#         -> runtime (CUDA 11.8 runtime, wheels only, non-root).
# Build:  docker build -t ghcr.io/OWNER/verl-p40:0.1.0 .      (build args below; mirrors for users in China)

ARG CUDA_DEVEL_IMAGE=nvidia/cuda:11.8.0-cudnn8-devel-ubuntu22.04
ARG CUDA_RUNTIME_IMAGE=nvidia/cuda:11.8.0-cudnn8-runtime-ubuntu22.04

# ------------------------------------------------------------------------------------------ python-base
FROM ${CUDA_DEVEL_IMAGE} AS python-base
ARG APT_MIRROR=""
ARG PIP_INDEX_URL=https://pypi.org/simple
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu118
ENV DEBIAN_FRONTEND=noninteractive PIP_INDEX_URL=${PIP_INDEX_URL} PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN if [ -n "$APT_MIRROR" ]; then sed -i "s|http://archive.ubuntu.com|$APT_MIRROR|g" /etc/apt/sources.list; fi \
 && apt-get update \
 && apt-get install -y --no-install-recommends python3.10 python3.10-venv python3.10-dev git ca-certificates \
      build-essential ninja-build \
 && rm -rf /var/lib/apt/lists/* \
 && python3.10 -m venv /opt/venv \
 && pip install --upgrade "pip==25.1.1" "setuptools==80.9.0" "wheel==0.45.1" \
 && pip install --index-url "${TORCH_INDEX_URL}" \
      "torch==2.6.0+cu118" "torchvision==0.21.0+cu118" "torchaudio==2.6.0+cu118"

# ------------------------------------------------------------------------------------------ apex (wheel)
FROM python-base AS apex
ARG APEX_REF=24.04.01
ARG TORCH_CUDA_ARCH_LIST="6.0;6.1;7.0;7.5;8.0;8.6;9.0"
ARG MAX_JOBS=4
ENV TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST} MAX_JOBS=${MAX_JOBS}
WORKDIR /build
RUN git clone --depth 1 --branch "${APEX_REF}" https://github.com/NVIDIA/apex.git \
 && pip install "packaging==25.0" \
 && pip wheel --no-deps --no-build-isolation -w /wheels \
      --config-settings "--build-option=--cpp_ext" --config-settings "--build-option=--cuda_ext" ./apex

# ------------------------------------------------------------------------------------------ verl (patched wheel)
FROM python-base AS verl
ARG VERL_REF=v0.5.0
WORKDIR /build
RUN git clone --depth 1 --branch "${VERL_REF}" https://github.com/volcengine/verl.git
COPY pyproject.toml README.md ./app-src/
COPY app ./app-src/app
COPY config ./app-src/config
# The patch set is applied by the product's own CLI; `--check` fails the build if any patch is missing.
RUN pip install "pyyaml==6.0.2" "omegaconf==2.3.0" "hydra-core==1.3.2" "pandas==2.2.3" "pyarrow==19.0.1" "tqdm==4.67.1" \
 && pip wheel --no-deps -w /wheels ./app-src \
 && pip install --no-deps /wheels/verl_p40-*.whl \
 && verl-p40 patch-verl /build/verl/verl \
 && verl-p40 patch-verl --check /build/verl/verl \
 && pip wheel --no-deps -w /wheels ./verl

# ------------------------------------------------------------------------------------------ runtime
FROM ${CUDA_RUNTIME_IMAGE} AS runtime
ARG APT_MIRROR=""
ARG PIP_INDEX_URL=https://pypi.org/simple
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu118
ARG HF_ENDPOINT=https://huggingface.co
ARG INSTALL_VLLM=0
ARG VERSION=0.1.0
ARG UID=1000
ENV DEBIAN_FRONTEND=noninteractive PIP_INDEX_URL=${PIP_INDEX_URL} PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 HF_ENDPOINT=${HF_ENDPOINT} HF_HOME=/home/verl/.cache/huggingface \
    VERL_P40_MODEL=/models/Qwen2.5-0.5B-Instruct VERL_P40_DATA=/data/gsm8k \
    VERL_P40_CHECKPOINTS=/checkpoints VERL_P40_LOGS=/logs RAY_USAGE_STATS_ENABLED=0
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
LABEL org.opencontainers.image.title="verl-p40" \
      org.opencontainers.image.description="PPO post-training with verl 0.5.0 on Tesla P40 and other old/small NVIDIA GPUs" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/verl-p40/verl-p40" \
      org.opencontainers.image.licenses="Apache-2.0" \
      io.verl-p40.cuda="11.8" io.verl-p40.torch="2.6.0+cu118" io.verl-p40.verl="0.5.0"
RUN if [ -n "$APT_MIRROR" ]; then sed -i "s|http://archive.ubuntu.com|$APT_MIRROR|g" /etc/apt/sources.list; fi \
 && apt-get update \
 && apt-get install -y --no-install-recommends python3.10 python3.10-venv ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && python3.10 -m venv /opt/venv \
 && pip install --upgrade "pip==25.1.1" \
 && pip install --index-url "${TORCH_INDEX_URL}" \
      "torch==2.6.0+cu118" "torchvision==0.21.0+cu118" "torchaudio==2.6.0+cu118"
COPY docker/requirements.txt /tmp/requirements.txt
RUN pip install -r /tmp/requirements.txt
COPY --from=apex /wheels/ /tmp/wheels/
COPY --from=verl /wheels/ /tmp/wheels/
# vLLM 0.8.5 (sm_70+) is off by default: its PyPI wheels are built for CUDA 12 and do not load beside
# torch 2.6.0+cu118. The P40 path never uses it (rollout name hf).
RUN pip install --no-deps /tmp/wheels/*.whl \
 && if [ "$INSTALL_VLLM" = "1" ]; then pip install "vllm==0.8.5"; fi \
 && rm -rf /tmp/wheels /tmp/requirements.txt \
 && verl-p40 patch-verl --check
COPY entrypoints/ /opt/verl-p40/entrypoints/
RUN useradd --create-home --uid "${UID}" --user-group verl \
 && mkdir -p /models /data /checkpoints /logs \
 && chown "${UID}:${UID}" /models /data /checkpoints /logs
USER ${UID}:${UID}
WORKDIR /home/verl
VOLUME ["/models", "/data", "/checkpoints", "/logs"]
ENTRYPOINT ["verl-p40"]
CMD ["--help"]
