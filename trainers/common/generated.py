"""The GENERATED marker: a file a data writer leaves beside files it made up (random pixels and
labels), whose text says so; accuracy mode reports it (data.generated_note), since an accuracy
measured on such files means nothing.

Its own module because every writer (data.py's MNIST and CIFAR-10 ones, imagenet.py's JPEG
tree) marks its files, and data.py hands ImageNet on to imagenet.py: the marker is below both.
"""
import os

#: The marker's file name, in the dataset's directory.
GENERATED = "GENERATED"


def mark_generated(data_dir, note):
    """The GENERATED marker beside files a writer made up, saying `note` (which writer, and why
    an accuracy on them means nothing)."""
    with open(os.path.join(data_dir, GENERATED), "w") as f:
        f.write(note + "\n")
