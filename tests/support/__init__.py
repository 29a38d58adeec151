"""Test helpers shared by the unit, wire and cluster tests and bench/: local servers that speak
real wire protocols (OpenAI, Anthropic, MCP, plain HTTP) and builders."""
