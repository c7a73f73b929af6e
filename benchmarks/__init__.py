"""Benchmarks of ai_tools: each ``bench_*.py`` module measures ours next to a bare baseline."""
