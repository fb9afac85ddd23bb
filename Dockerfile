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
# psycopg is only needed when KVLAB_DATABASE_URL points at PostgreSQL (a shared deployment).
RUN pip install -r requirements.txt "psycopg[binary]>=3.1,<4"

COPY . .
RUN useradd --create-home --uid 10001 kvlab && mkdir -p /data && chown kvlab /data
USER kvlab
VOLUME ["/data"]
EXPOSE 8501

HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \
  CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8501/healthz', timeout=8)"

# .streamlit/config.toml sets headless, no usage stats, XSRF protection and small uploads. ui.serve is
# `streamlit run app.py` with the app's imports done first, so the health check answers once pages are fast.
CMD ["python", "-m", "ui.serve", "--server.port=8501", "--server.address=0.0.0.0"]
