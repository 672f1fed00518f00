# Baton runs its TypeScript sources through tsx (a runtime dependency), so the image is the
# sources plus production dependencies: no build stage. One image serves every role; the
# command picks it (`api`, `worker`, or `start`, which needs redis-server and is for local use).
FROM node:20-slim

WORKDIR /app
ENV NODE_ENV=production

COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

COPY tsconfig.json ./
COPY bin ./bin
COPY src ./src

USER node
# 3000: the API (PORT). 9464: a worker's /metrics, /healthz, /readyz (METRICS_PORT).
EXPOSE 3000 9464
ENTRYPOINT ["node", "bin/baton.js"]
CMD ["api"]
