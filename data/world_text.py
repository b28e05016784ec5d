"""Prose for the synthetic world (data/world.py): sentence templates. Names: data/world_names.py.

Placeholders in templates:
  {n}  the entity's full name (openings only, so every document names its subject early)
  {S}  the document subject, sentence-initial form ("Marrow", "The city", "The Kelmar Summit")
  {s}  the document subject, mid-sentence form ("Marrow", "the city", "the Kelmar Summit")
  {o}  the other entity's full name;  {l}  a list of full names ("A, B and C")
  {v}  a value's surface string (a year, "12,400", "architect");  {av} the value with "a"/"an"
  {k}  a work's kind ("novel");  {verb} / {part}  its creation verb ("wrote" / "written")
Every template that states a fact contains that fact's {o}/{l}/{v} placeholder (tested), so the
name or value is literally in the text. Fillers state nothing a question could ask about.
"""


def _sections(text: str) -> dict:
    """'## key' lines open a section of one template per line; a key of two words is a tuple."""
    out, key = {}, None
    for line in filter(None, map(str.strip, text.splitlines())):
        if line.startswith("## "):
            words = line[3:].split()
            key = words[0] if len(words) == 1 else tuple(words)
            out[key] = []
        else:
            out[key].append(line)
    return out


# --- openings: name the entity and its type (and the opening attribute, if any) ---------------
OPENING = _sections("""
## person
{n} is {av}.
{n} is a noted {v}.
{n} is known as {av}.
{n} has worked for many years as {av}.
{n} is {av} by profession.
{n} is {av} whose career has drawn wide attention.
## city
{n} is a city.
{n} is an old city on the banks of a river.
{n} is a city and regional centre.
{n} is a city known for its markets and bridges.
{n} is a city with a long history of trade.
## country
{n} is a country.
{n} is a sovereign state.
{n} is a country with a varied landscape.
{n} is an independent country.
{n} is a nation with a long written history.
## organisation
{n} is {av} company.
{n} is a company active in the {v} sector.
{n} is {av} firm.
{n} is a company in the {v} industry.
{n} is {av} business.
## university
{n} is a university.
{n} is a public university.
{n} is a research university.
{n} is an institution of higher education.
{n} is a university with a broad range of faculties.
## work
{n} is {av}.
{n} is {av} that attracted a devoted following.
{n} is {av} that critics continue to discuss.
{n} is {av} remembered for its unusual structure.
{n} is {av} of some renown.
## event
The {n} was {av}.
The {n} was {av} that drew visitors from far away.
The {n} was {av} remembered by many who attended.
The {n} was {av} with a packed programme.
The {n} was {av} that made headlines at the time.
""")
# attributes stated in the opening sentence (its {v}), so no separate sentence is needed.
OPENING_ATTR = {"person": "occupation", "organisation": "industry", "work": "kind",
                "event": "category"}


# --- own facts: "## type relation" -> templates, stated in the subject's document -------------
# "born_in+birth_year" states a relation and an attribute in one sentence.
OWN = _sections("""
## person birth_year
{S} was born in {v}.
{S}'s year of birth is recorded as {v}.
{v} was the year in which {s} was born.
{S} came into the world in {v}.
Records give {v} as the year {s} was born.
## person born_in
{S} was born in {o}.
{S} is a native of {o}.
{o} is the birthplace of {s}.
Born in {o}, {s} later moved away to pursue a career.
{S} hails from the city of {o}.
The birthplace of {s} was {o}.
## person born_in+birth_year
{S} was born in {o} in {v}.
Born in {v}, {s} grew up in {o}.
{S} was born in {v} in the city of {o}.
In {v}, {s} was born in {o}.
{o} is where {s} was born in {v}.
## person works_for
{S} works for {o}.
{S} is employed by {o}.
{S} joined {o} and has remained there since.
{o} employs {s}.
{S} holds a position at {o}.
At {o}, {s} leads a small team.
## person studied_at
{S} studied at {o}.
{S} is a graduate of {o}.
{S} received a degree from {o}.
{o} is where {s} was educated.
After finishing school, {s} enrolled at {o}.
{S} attended {o}.
## person spouse
{S} is married to {o}.
{S} married {o}.
{o} is the spouse of {s}.
{S} and {o} are married.
The spouse of {s} is {o}.
## city population
{S} has a population of {v}.
{v} people live in {s}.
The population of {s} is {v}.
{S} is home to {v} residents.
With {v} inhabitants, {s} is a busy place.
A census counted {v} inhabitants in {s}.
## city founded_year
{S} was founded in {v}.
Settlers founded {s} in {v}.
The founding of {s} took place in {v}.
{S} has existed since its founding in {v}.
Founded in {v}, {s} grew slowly at first.
## city located_in
{S} is located in {o}.
{S} lies in {o}.
{S} is a city in {o}.
{o} is the country where {s} is located.
Geographically, {s} is part of {o}.
## country population
{S} has a population of {v}.
{v} people live in {s}.
The population of {s} stands at {v}.
{S} is home to {v} people.
A recent census counted {v} residents in {s}.
## country currency
The currency of {s} is the {v}.
{S} uses the {v} as its currency.
The official currency of {s} is the {v}.
{S} adopted the {v} as its currency.
Payments in {s} are made in the {v}.
## country founded_year
{S} was founded in {v}.
{S} became an independent state in {v}.
{S} has existed as a state since {v}.
{S} was established as a state in {v}.
Founded in {v}, {s} soon drew up its first constitution.
## country capital
The capital of {s} is {o}.
{S} has its capital at {o}.
{o} is the capital of {s}.
{S}'s capital city is {o}.
The seat of government of {s} is {o}.
## organisation founded_year
{S} was founded in {v}.
{S} was established in {v}.
Founded in {v}, {s} grew steadily.
{S} has been in business since {v}.
{S} opened its doors in {v}.
## organisation employees
{S} has {v} employees.
{S} employs {v} people.
The workforce of {s} numbers {v}.
{v} people work for {s}.
With a staff of {v}, {s} is a sizeable employer.
## organisation founded_by
{S} was founded by {o}.
{o} founded {s}.
The founder of {s} is {o}.
{S} was started by {o}.
{o} established {s}.
## organisation founded_by+founded_year
{S} was founded by {o} in {v}.
{o} founded {s} in {v}.
In {v}, {o} established {s}.
{S} was started in {v} by {o}.
Founded in {v} by {o}, {s} grew quickly.
## organisation headquartered_in
{S} is headquartered in {o}.
The headquarters of {s} are in {o}.
{S} is based in {o}.
{S} has its head office in {o}.
{o} is home to the headquarters of {s}.
## university founded_year
{S} was founded in {v}.
{S} was established in {v}.
{S} opened in {v}.
Founded in {v}, {s} began with a handful of teachers.
{S} admitted its first students in {v}.
## university students
{S} has {v} students.
{v} students are enrolled at {s}.
{S} enrols {v} students.
The student body of {s} numbers {v}.
With {v} students, {s} is a lively place.
## university located_in
{S} is located in {o}.
{S} is in the city of {o}.
The campus of {s} is in {o}.
{o} is home to {s}.
{S} is based in {o}.
## work release_year
{S} was released in {v}.
{S} first appeared in {v}.
{S} came out in {v}.
The year {v} saw the release of {s}.
Released in {v}, {s} found an audience slowly.
## work created_by
{S} was {part} by {o}.
{o} {verb} {s}.
{S} is the work of {o}.
{S} was created by {o}.
{o} is the creator of {s}.
## work published_by
{S} was released by {o}.
{o} released {s}.
{S} was distributed by {o}.
The release of {s} was handled by {o}.
{o} brought out {s}.
## event year
{S} took place in {v}.
{S} was held in {v}.
In {v}, {s} drew visitors from across the region.
{S} dates from {v}.
{v} was the year of {s}.
## event attendance
{S} attracted {v} visitors.
{v} people attended {s}.
Attendance at {s} reached {v}.
{S} drew a crowd of {v}.
Organisers counted {v} attendees at {s}.
## event held_in
{S} was held in {o}.
{S} took place in {o}.
{o} hosted {s}.
The venue of {s} was in {o}.
{S} was staged in {o}.
## event held_in+year
{S} was held in {o} in {v}.
In {v}, {o} hosted {s}.
{S} took place in {o} in {v}.
{o} was the venue of {s} in {v}.
Held in {o} in {v}, {s} drew visitors from many places.
## event organised_by
{S} was organised by {o}.
{o} organised {s}.
The organiser of {s} was {o}.
{S} was run by {o}.
{o} was responsible for {s}.
""")


# --- facts stated in the OBJECT's document: relation -> templates ({o}: the fact's subject) ----
# Relations in INV_LIST are gathered into one sentence with {l}; the others get one each.
INV_LIST = _sections("""
## born_in
Notable people born in {s} include {l}.
{S} is the birthplace of {l}.
People born in {s} include {l}.
Natives of {s} include {l}.
{S} counts {l} among its natives.
## works_for
Notable employees of {s} include {l}.
{S} employs {l}.
Staff members at {s} include {l}.
{S} counts {l} among its staff.
People who work for {s} include {l}.
## studied_at
Notable alumni include {l}.
Graduates of {s} include {l}.
{S} counts {l} among its alumni.
Former students of {s} include {l}.
Alumni of {s} include {l}.
## headquartered_in
{S} is home to the headquarters of {l}.
Companies based in {s} include {l}.
Businesses headquartered in {s} include {l}.
Firms with head offices in {s} include {l}.
{S} hosts the head offices of {l}.
## located_in
Cities in {s} include {l}.
Major cities of {s} include {l}.
{S} contains the cities of {l}.
Urban centres in {s} include {l}.
The cities of {s} include {l}.
## published_by
Works released by {s} include {l}.
The catalogue of {s} includes {l}.
{S} has released {l}.
Titles issued by {s} include {l}.
{S} counts {l} among its releases.
""")
INV_ONE = _sections("""
## capital
{S} is the capital of {o}.
{S} serves as the capital of {o}.
As the capital of {o}, {s} hosts the national government.
{o} has its capital in {s}.
The government of {o} sits in {s}, the national capital.
## uni_located_in
{S} is home to {o}.
{o} is located in {s}.
{S} hosts the campus of {o}.
Higher education in {s} is provided by {o}, among others.
{o} has its campus in {s}.
## founded_by
{S} founded {o}.
{S} is the founder of {o}.
{o} was founded by {s}.
{S} established {o}.
Among other things, {s} is remembered as the founder of {o}.
## created_by
{S} {verb} the {k} {o}.
The {k} {o} was {part} by {s}.
{S} is best known for the {k} {o}.
{o}, {ak}, was {part} by {s}.
Among the works of {s} is the {k} {o}.
## held_in
{S} hosted the {o}.
The {o} took place in {s}.
{S} was the venue of the {o}.
The {o} was held in {s}.
Visitors came to {s} for the {o}.
## organised_by
{S} organised the {o}.
The {o} was organised by {s}.
{S} was the organiser of the {o}.
{S} ran the {o}.
The {o} was put on by {s}.
""")


# --- fillers: no names but the subject, no numbers, nothing answerable -----------------------
FILLERS = _sections("""
## person
{S} has given many public talks over the years.
Colleagues describe {s} as meticulous and patient.
{S} rarely gives interviews.
Little is known about the early childhood of {s}.
{S} has kept a private notebook for decades.
Friends recall that {s} loved long walks.
{S} is often quoted in regional newspapers.
The personal papers of {s} are held in a private collection.
## city
{S} is known for its covered markets.
The old town of {s} has narrow, winding streets.
A river runs through the centre of {s}.
{S} has a temperate climate with cool winters.
Many visitors come to {s} in the summer.
The main square of {s} hosts a weekly market.
Trams connect the districts of {s}.
## country
{S} has a varied landscape of hills and plains.
The cuisine of {s} is known for its slow-cooked stews.
{S} is divided into several provinces.
Agriculture remains important in {s}.
The flag of {s} shows three horizontal bands.
Folk music is popular throughout {s}.
## organisation
{S} has expanded into several new markets.
{S} publishes an annual report.
{S} is known for its distinctive logo.
Analysts consider {s} a steady performer.
{S} has faced occasional labour disputes.
The early records of {s} were lost in a fire.
## university
{S} is known for its large library.
The campus of {s} includes several historic buildings.
{S} offers degrees in the sciences and the humanities.
Students at {s} run a weekly newspaper.
{S} holds an open day every spring.
## work
{S} received mixed reviews at first.
Critics have praised the structure of {s}.
{S} gained a cult following over time.
Several scholars have written about {s}.
A restored edition of {s} appeared later.
{S} divided critics on its release.
## event
{S} featured talks, performances and exhibitions.
Volunteers helped to run {s}.
Local newspapers covered {s} in detail.
Tickets for {s} sold out quickly.
The weather during {s} was mild.
## any
Further details about {s} are scarce.
Sources about {s} disagree on minor points.
Accounts of {s} vary in their details.
""")
