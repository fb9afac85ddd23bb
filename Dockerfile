# KV Lab app image: `docker build -t kvlab .` then `docker run -p 8501:8501 -v kvlab-data:/data kvlab`.
# CPU hosts run the torch backend; on a CUDA host (`--gpus all`) the Triton kernels run compiled.
# For a smaller CPU-only image pass --build-arg PIP_EXTRA_INDEX_URL=<your PyTorch CPU wheel index>.
FROM python:3.11-slim

ARG PIP_EXTRA_INDEX_URL=""
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_EXTRA_INDEX_URL=${PIP_EXTRA_INDEX_URL} \
    KVLAB_DATA_DIR=/data

WORKDIR /app
COPY requirements.txt .
# psycopg is only needed when KVLAB_DATABASE_URL points at PostgreSQL (a shared deployment). The
# dependencies come first, in their own layer, so a change to the code does not download them again.
RUN pip install -r requirements.txt "psycopg[binary]>=3.1,<4"

COPY . .
# The course itself, as the `kvlab` package and command (pyproject.toml); its dependencies are in already.
RUN pip install --no-deps . && kvlab --version
RUN useradd --create-home --uid 10001 kvlab && mkdir -p /data && chown kvlab /data
USER kvlab
VOLUME ["/data"]
EXPOSE 8501

# The start checks the settings and runs every lesson once (ui/warm.py) before the health check answers: on two
# cores that takes up to a few minutes, hence the long start period. /healthz also asks the progress database
# (ui/health.py: up to 5 s), hence the timeout.
HEALTHCHECK --interval=30s --timeout=10s --start-period=300s --retries=3 \
  CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8501/healthz', timeout=8)"

# .streamlit/config.toml sets headless, no usage stats, XSRF protection and small uploads. `kvlab serve` is
# `streamlit run app.py` with the settings checked and the app's imports and lessons done first, so the health
# check answers once pages are fast.
CMD ["kvlab", "serve", "--server.port=8501", "--server.address=0.0.0.0"]
