"""PyTorch in, PyTorch out: `persist_rnn.compile(module, example_inputs)` (module.py) and the
`torch.compile(model, backend="persist_rnn")` backend (backend.py). Needs torch."""
