"""Placeholder replaced below."""
def unavailable_reason(*, device=None, training=False, dropout_p=0.0):
    return "not built yet"
def flex_attention_backend(*a, **k):
    raise NotImplementedError
