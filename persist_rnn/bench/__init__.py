"""The benchmark harness, apart from the product: the peers persist_rnn is timed against (torch's
cuDNN layers, cuDNN's algorithms called directly, FlashRNN), GPU timing, the suite behind
`persist-rnn bench`, and the ONNX layer models with ONNX Runtime references that the tests and
benchmarks share. Nothing in compile, runtime, frontend, transform or schedule imports it."""
