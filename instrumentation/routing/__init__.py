"""Routing as pure functions on tensors: features, EMA, clustering, hierarchy, controller, selection."""
