"""Placeholder replaced below."""
def unavailable_reason(*, device=None, training=False, dropout_p=0.0):
    return "flash_attn is not installed"
def flash_attention_backend(*a, **k):
    raise NotImplementedError
