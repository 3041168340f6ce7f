"""harness/backends/vllm."""
