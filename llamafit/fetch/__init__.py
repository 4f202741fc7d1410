"""Getting headers: local paths, http(s) Range reads, Hugging Face, the demo model, model stores: an
edge."""
