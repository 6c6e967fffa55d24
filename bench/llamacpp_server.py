#!/usr/bin/env python3
"""llama.cpp's OpenAI server (llama-cpp-python[server]) with weights in plain
CPU buffers, for bench/serve_bench.py. The AMX weight buffer segfaults in
ggml_backend_amx_mul_mat on this project's CPUs (ggml-org/llama.cpp#20824),
which kills the stock server on its second request; use_extra_bufts = False
avoids it (and also turns off llama.cpp's repacked layouts, which can cost it
some speed). Arguments are those of `python -m llama_cpp.server`; pass
`--interrupt_requests False` for a serving benchmark, or every new request
cuts the running stream off."""
import llama_cpp.llama_cpp as lc

_orig = lc.llama_model_default_params


def _plain_cpu_params():
    p = _orig()
    p.use_extra_bufts = False
    return p


lc.llama_model_default_params = _plain_cpu_params

if __name__ == "__main__":
    from llama_cpp.server.__main__ import main
    main()
