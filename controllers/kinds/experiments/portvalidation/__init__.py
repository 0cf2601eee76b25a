"""Model-port validation: the ported model's answers judged for quality."""
