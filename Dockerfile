# Two stages: the first compiles src/ to dist/ and builds the run inspector (TypeScript and
# Vite are devDependencies); the image is
# dist/ and bin/ on production dependencies only, so nothing in it transforms TypeScript at
# run time. One image serves every role; the command picks it (`api`, `worker`, or `start`,
# which needs redis-server and is for local use).
FROM node:20-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json vite.ui.config.ts ./
COPY scripts ./scripts
COPY src ./src
RUN npm run build

FROM node:20-slim
WORKDIR /app
ENV NODE_ENV=production

COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

COPY bin ./bin
COPY --from=build /app/dist ./dist
# An agent module mounted outside /app (docker-compose.agents.yml mounts one at /agents) imports
# baton-agents: Node looks for it in a node_modules above the module, so this one, at the root,
# is the image's Baton for every folder below /.
RUN mkdir -p /node_modules && ln -s /app /node_modules/baton-agents

USER node
# 3000: the API (PORT). 9464: a worker's /metrics, /healthz, /readyz (METRICS_PORT).
EXPOSE 3000 9464
ENTRYPOINT ["node", "bin/baton.js"]
CMD ["api"]
