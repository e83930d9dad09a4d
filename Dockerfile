# verl-p40: PPO/GRPO post-training with verl 0.5.0 on old and small NVIDIA GPUs (Tesla P40 first).
#
# Stages: python-base (Debian 12, Python 3.11, torch 2.6.0+cu118 with its own CUDA libraries)
#         -> apex (builder: one Apex wheel, its Python package; with APEX_CUDA_EXT=1 its CUDA extensions too,
#            compiled by the Debian CUDA toolkit of torch's CUDA, 11.8 or 12.4)
#         -> runtime (python-base + the pinned lock + Apex + verl 0.5.0 patched + verl-p40; non-root).
# The runtime needs nothing from the host but the NVIDIA driver (>= 450.80.02; CUDA 11.8 minor-version
# compatibility): torch's cu118 wheels carry the CUDA runtime, cuBLAS and cuDNN.
#
# Build:  docker compose build   (or: docker build -t verl-p40:0.1.0 .; the tag compose runs by default)
# Behind a firewall or a TLS-inspecting proxy, every source has a build argument (docs/image.md):
#   BASE_IMAGE, APT_MIRROR, PIP_INDEX_URL, TORCH_INDEX_URL, APEX_URL; CA certificates dropped into docker/certs/.
# The -vllm variant (sm_70+; vLLM 0.8.5 is built for PyPI's torch 2.6.0+cu124, which needs driver >= 525.60.13),
# in .env, then `docker compose build`: TORCH_INDEX_URL=https://pypi.org/simple TORCH_VERSION=2.6.0
#   LOCK=requirements-vllm.txt APEX_STAGE=no-apex BUILD_CHECKS=torch-build,verl,vllm VERL_P40_TAG=0.1.0-vllm
# (Apex is left out there, as only verl's Megatron backend uses it; APEX_STAGE=apex with BUILD_CHECKS naming apex
# builds it, and with APEX_CUDA_EXT=1 compiles its extensions against Debian 13's CUDA 12.4.)

ARG BASE_IMAGE=docker.io/library/debian:12.8-slim
# The stage whose /wheels hold Apex: apex (built here) or no-apex (none).
ARG APEX_STAGE=apex

# ------------------------------------------------------------------------------------------ python-base
FROM ${BASE_IMAGE} AS python-base
ARG APT_MIRROR=http://deb.debian.org
ARG PIP_INDEX_URL=https://pypi.org/simple
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu118
ARG TORCH_VERSION=2.6.0+cu118
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 \
    PIP_INDEX_URL=${PIP_INDEX_URL} PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CONSTRAINT=/etc/verl-p40/constraints.txt \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt \
    VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# Extra CA certificates (a TLS-inspecting proxy's): *.crt files in docker/certs/ join the system bundle, which
# pip, curl and huggingface_hub (REQUESTS_CA_BUNDLE) then use.
COPY docker/certs/ /usr/local/share/ca-certificates/verl-p40/
COPY docker/debian.sources /etc/apt/sources.list.d/debian.sources
# torch is pinned once, here: PIP_CONSTRAINT holds every later pip call of every stage to this build.
RUN rm -f /etc/apt/sources.list \
 && sed -i "s|@APT_MIRROR@|${APT_MIRROR}|g" /etc/apt/sources.list.d/debian.sources \
 && apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && update-ca-certificates \
 && mkdir -p /etc/verl-p40 \
 && echo "torch==${TORCH_VERSION}" > /etc/verl-p40/constraints.txt \
 && python3 -m venv /opt/venv \
 && pip install "pip==25.1.1" "setuptools==80.9.0" "wheel==0.45.1" \
 && pip install --index-url "${TORCH_INDEX_URL}" --extra-index-url "${PIP_INDEX_URL}" "torch==${TORCH_VERSION}"

# ------------------------------------------------------------------------------------------ apex (builder)
# Apex 25.01 (the first tag that builds against torch 2.6: apex e552ad99, NVIDIA/apex#1898), built as a wheel.
# Nothing any profile runs imports Apex's C++/CUDA extensions: every profile trains with verl's FSDP backend, and
# only verl's Megatron backend (no profile) uses them. So by default the wheel is Apex's Python package only:
# seconds, no CUDA toolkit. APEX_CUDA_EXT=1 also compiles the extensions (--cpp_ext --cuda_ext) for
# TORCH_CUDA_ARCH_LIST (default 6.1+PTX: the P40's sm_61, and PTX that newer cards compile once when Apex loads;
# every card from Pascal to Hopper, as the release images are built: "6.0;6.1;7.0;7.5;8.0;8.6;9.0") with MAX_JOBS
# compile jobs (empty: one per core of the building host), after installing the Debian CUDA toolkit of torch's CUDA.
FROM python-base AS apex
ARG APT_MIRROR=http://deb.debian.org
ARG APEX_URL=https://github.com/NVIDIA/apex/archive/refs/tags/25.01.tar.gz
ARG APEX_CUDA_EXT=0
ARG TORCH_CUDA_ARCH_LIST="6.1+PTX"
ARG MAX_JOBS=""
ENV TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST}
# The toolkit, only for APEX_CUDA_EXT=1. Apex's setup refuses a toolkit whose CUDA differs from torch's, so the
# toolkit follows torch: Debian 12's non-free CUDA 11.8 (with the GCC 11 it supports) for the default torch
# 2.6.0+cu118; Debian 13's CUDA 12.4 for PyPI's torch 2.6.0 (+cu124), its packages only, on Debian 12's C library and
# GCC 12 (docker/apex/: the pin, and a stub for the driver libraries those packages depend on, which nothing here
# loads). Python's headers for both.
COPY docker/apex/ /tmp/apex-toolkit/
RUN cuda=$(python -c "import torch; print(torch.version.cuda)") \
 && case "${APEX_CUDA_EXT}" in \
      0) echo "apex: no CUDA toolkit installed (APEX_CUDA_EXT=0: Apex's Python package only; no profile imports its CUDA extensions)" \
         && rm -rf /tmp/apex-toolkit && exit 0 ;; \
      1) ;; \
      *) echo "apex: APEX_CUDA_EXT=${APEX_CUDA_EXT} is neither 0 nor 1 (1 compiles Apex's CUDA extensions, for verl's Megatron backend)" >&2; exit 1 ;; \
    esac \
 && case "$cuda" in \
      11.8) gcc=11 ;; \
      12.4) gcc=12 \
        && sed "s|@APT_MIRROR@|${APT_MIRROR}|g" /tmp/apex-toolkit/trixie-cuda.sources \
             > /etc/apt/sources.list.d/trixie-cuda.sources \
        && cp /tmp/apex-toolkit/trixie-cuda.pref /etc/apt/preferences.d/trixie-cuda.pref \
        && chmod 0755 /tmp/apex-toolkit/driver-stub/DEBIAN \
        && dpkg-deb --build /tmp/apex-toolkit/driver-stub /tmp/driver-stub.deb && dpkg -i /tmp/driver-stub.deb ;; \
      *) echo "apex: no Debian CUDA toolkit for torch's CUDA ${cuda} (11.8: Debian 12, 12.4: Debian 13)." \
              "Build Apex's Python package only (APEX_CUDA_EXT=0), or none: APEX_STAGE=no-apex BUILD_CHECKS=torch-build,verl" >&2; exit 1 ;; \
    esac \
 && apt-get update \
 && apt-get install -y --no-install-recommends nvidia-cuda-toolkit "g++-${gcc}" python3-dev \
 && rm -rf /var/lib/apt/lists/* /tmp/apex-toolkit /tmp/driver-stub.deb \
 && echo "gcc-${gcc} g++-${gcc}" > /etc/verl-p40/apex-compilers \
 && nvcc --version \
 && case "$(nvcc --version)" in \
      *"release ${cuda},"*) ;; \
      *) echo "apex: the toolkit installed is not CUDA ${cuda}, torch's (a Debian update?)" >&2; exit 1 ;; \
    esac
WORKDIR /build/apex
# Apex's setup.py asks nvcc for its version even when it compiles nothing (setup.py:137 of 25.01); only the
# extension builds read it, so the Python-only build answers it with torch's CUDA version instead of a toolkit.
# Timeouts: a blocked or stalled host (GitHub from mainland China) fails here in minutes, naming the URL, instead of
# hanging the build; APEX_URL then names a mirror (.env.example).
RUN curl -fsSL --connect-timeout 30 --max-time 900 --retry 3 -o /tmp/apex.tar.gz "${APEX_URL}" \
 && tar -xzf /tmp/apex.tar.gz --strip-components=1 \
 && rm /tmp/apex.tar.gz \
 && pip install "packaging==25.0" "ninja==1.11.1.4" \
 && if [ "${APEX_CUDA_EXT}" = 1 ]; then \
      jobs=${MAX_JOBS:-$(nproc)} \
      && echo "apex: compiling its C++/CUDA extensions (--cpp_ext --cuda_ext), for verl's Megatron backend (APEX_CUDA_EXT=1)," \
              "for TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST}, MAX_JOBS=${jobs}" \
      && read -r cc cxx < /etc/verl-p40/apex-compilers \
      && CUDA_HOME=/usr MAX_JOBS=$jobs CC=$cc CXX=$cxx pip wheel --no-deps --no-build-isolation -v -w /wheels \
           --config-settings "--build-option=--cpp_ext" --config-settings "--build-option=--cuda_ext" . ; \
    else \
      line='_, bare_metal_version = get_cuda_bare_metal_version(CUDA_HOME)' \
      && grep -qxF "$line" setup.py \
      || { echo "apex: setup.py has no line '$line' (another Apex than 25.01?): build with APEX_CUDA_EXT=1" >&2; exit 1; } \
      && sed -i "s|^${line}\$|bare_metal_version = parse(torch.version.cuda)|" setup.py \
      && echo "apex: Python package only, no C++/CUDA extensions compiled (APEX_CUDA_EXT=0): every profile trains with" \
              "verl's FSDP backend, which never imports them; APEX_CUDA_EXT=1 compiles them for verl's Megatron backend" \
      && pip wheel --no-deps --no-build-isolation -w /wheels . ; \
    fi \
 && ls -l /wheels

FROM python-base AS no-apex
RUN mkdir -p /wheels

FROM ${APEX_STAGE} AS apex-selected

# ------------------------------------------------------------------------------------------ runtime
FROM python-base AS runtime
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG VERL_VERSION=0.5.0
ARG TORCH_VERSION=2.6.0+cu118
# The full lock this image installs: requirements.txt (default) or requirements-vllm.txt (the -vllm variant).
ARG LOCK=requirements.txt
# The build-time checks `verl-p40 doctor` runs (the -vllm variant: torch-build,verl,vllm).
ARG BUILD_CHECKS=torch-build,apex,verl
# 1 where the apex stage compiled Apex's CUDA extensions: the doctor's apex check then imports them too.
ARG APEX_CUDA_EXT=0
ARG VERSION=0.1.0
ARG UID=1000
# Checks that `verl-p40 doctor` may skip at build time, by name (docker/standin/'s older route skips apex).
ARG BUILD_CHECK_SKIP=""
ENV VERL_P40_APEX_CUDA_EXT=${APEX_CUDA_EXT} PYTHONUNBUFFERED=1 HF_HOME=/home/verl/.cache/huggingface \
    VERL_P40_MODELS=/models VERL_P40_DATA=/data/gsm8k \
    VERL_P40_CHECKPOINTS=/checkpoints VERL_P40_LOGS=/logs RAY_USAGE_STATS_ENABLED=0
LABEL org.opencontainers.image.title="verl-p40" \
      org.opencontainers.image.description="PPO post-training with verl 0.5.0 on Tesla P40 and other old/small NVIDIA GPUs" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/verl-p40/verl-p40" \
      org.opencontainers.image.licenses="Apache-2.0" \
      io.verl-p40.torch="${TORCH_VERSION}" io.verl-p40.verl="${VERL_VERSION}"
# The full lock (every transitive dependency pinned) installs without resolution, so nothing can replace torch.
COPY docker/${LOCK} /etc/verl-p40/requirements.txt
RUN pip install --no-deps -r /etc/verl-p40/requirements.txt
RUN --mount=type=bind,from=apex-selected,source=/wheels,target=/tmp/apex-wheels \
    find /tmp/apex-wheels -name '*.whl' -print0 | xargs -0 -r pip install --no-deps \
 && pip install --no-deps "verl==${VERL_VERSION}"
COPY pyproject.toml README.md /opt/verl-p40/src/
COPY app /opt/verl-p40/src/app
COPY config /opt/verl-p40/src/config
COPY entrypoints/ /opt/verl-p40/entrypoints/
# Every folder compose mounts a volume on exists here, owned by the runtime user: a new named volume copies
# the ownership of the image's folder (otherwise it is root-owned and the services cannot write to it).
RUN pip install --no-deps --no-build-isolation /opt/verl-p40/src \
 && pip check \
 && verl-p40 patch-verl \
 && VERL_P40_DOCTOR_SKIP="${BUILD_CHECK_SKIP}" verl-p40 doctor --only "${BUILD_CHECKS}" \
 && useradd --create-home --uid "${UID}" --user-group verl \
 && mkdir -p /models /data /checkpoints /logs /home/verl/.cache/huggingface \
 && chown -R "${UID}:${UID}" /models /data /checkpoints /logs /home/verl
USER ${UID}:${UID}
WORKDIR /home/verl
VOLUME ["/models", "/data", "/checkpoints", "/logs", "/home/verl/.cache/huggingface"]
ENTRYPOINT ["verl-p40"]
CMD ["--help"]
