"""Production images back to labelling: a deployment's collection rule (`rules`), the decision
made once a prediction has been answered (`decide`), and the worker's storing of the caller's
image, with the model's predictions as suggestions (never labels), into the rule's dataset
(`store`).

The decision (deploy.predict, after the answer has gone out) is cheap: the rule is on; a
prediction of the chosen classes (a classifier: its top-1) has a confidence inside the band; a
draw falls under the sampling rate; and the day's count (one Redis INCR per rule and UTC day)
is within the cap. Only then are the image's bytes put in Redis, under a key that expires
within the hour, and a task sent with the key's name: the worker takes the bytes (deleting
the key) and stores them. Nothing of a call that is not selected is written anywhere."""
