# syntax=docker/dockerfile:1
# One image for every Seraph service; the command chooses the service (deploy/ sets it):
#   node services/api/dist/main.js | services/jobs/dist/main.js | services/ui-gateway/dist/main.js
#   node services/executor-linux/dist/main.js                      (executor agent)
#   tini -- node services/executor-linux/dist/supervisor-host/main.js   (supervisor host)
# The filesystem is what scripts/build-image-layout.mjs produces (a test starts every service
# from that layout): production node_modules only, compiled dist/ without tests, the UI bundle,
# the per-job supervisor's bundle, and the pinned Node 24 proof runtime at
# /opt/node-v24.15.0/bin/node (which runs the jobs and the supervisors).
ARG NODE_IMAGE=node:20-bookworm-slim

FROM ${NODE_IMAGE} AS build
WORKDIR /src
# Dependencies first (cached while only sources change); every workspace's package.json.
COPY package.json package-lock.json ./
COPY packages/postgres-server/package.json packages/postgres-server/
COPY packages/attestation/package.json packages/attestation/
COPY packages/proto/package.json packages/proto/
COPY packages/kit/package.json packages/kit/
COPY packages/profiles/package.json packages/profiles/
COPY packages/embedded/package.json packages/embedded/
COPY packages/cli/package.json packages/cli/
COPY services/executor-linux/package.json services/executor-linux/
COPY services/jobs/package.json services/jobs/
COPY services/api/package.json services/api/
COPY services/ui-gateway/package.json services/ui-gateway/
COPY test/package.json test/
COPY scripts/ scripts/
RUN npm ci --no-audit --no-fund
COPY . .
RUN npm run build && node scripts/build-image-layout.mjs /layout

FROM ${NODE_IMAGE} AS runtime
# tini: PID 1 of the supervisor host's PID namespace (reaps every orphan, forwards signals).
# python3: Debian's CPython 3.11 at /usr/bin/python3, the runtime of the default profile
# (repo-python3-v1); Node jobs run on the pinned runtime. util-linux (unshare, setpriv) is part
# of the base image.
RUN apt-get update \
  && apt-get install -y --no-install-recommends tini python3 \
  && rm -rf /var/lib/apt/lists/* \
  && groupadd --system --gid 10001 seraph \
  && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin seraph
COPY --from=build --chown=root:root /layout/ /
WORKDIR /opt/seraph
# The per-job supervisors run on the pinned runtime (the services run on the image's node).
ENV NODE_ENV=production SERAPH_SUPERVISOR_RUNTIME=/opt/node-v24.15.0/bin/node
USER 10001:10001
CMD ["node", "services/api/dist/main.js"]
