"""Monitoring tests use the root conftest's fixtures: adopted_lab, live_redis, redis_server."""
