"""`python -m bench soak`: a long steady mixed load and the resident memory it leaves."""
